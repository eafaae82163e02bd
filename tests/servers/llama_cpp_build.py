"""Building the real servers of tests/servers/llama_cpp.py: the pinned llama-cpp-python sdist,
where everything lives under the cache folder (``Layout``), the build steps (each skipped when
its output is there) and whether a server is ready to start (``available``). The command line
and the documentation are in tests/servers/llama_cpp.py, which re-exports these names.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

LLAMA_CPP_PYTHON_VERSION = "0.3.36"
Kind = Literal["llama-server", "llama-cpp-python"]
KINDS: tuple[Kind, ...] = ("llama-server", "llama-cpp-python")
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=ON",  # libllama.so for llama-cpp-python, from this same build
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # the web UI would be downloaded
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
)


class BuildError(RuntimeError):
    pass


CACHE_ENV = "HARNESS_LLAMA_CPP_CACHE"


def default_cache() -> Path:
    """``$HARNESS_LLAMA_CPP_CACHE``, else ``$XDG_CACHE_HOME/batch-position-harness/llama.cpp``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "batch-position-harness" / "llama.cpp"


@dataclass(frozen=True)
class Layout:
    """Where everything lives under the cache folder."""

    root: Path

    @property
    def sdist(self) -> Path:
        return self.root / f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}.tar.gz"

    @property
    def src(self) -> Path:
        return self.root / "src" / f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}"

    @property
    def llama_src(self) -> Path:
        return self.src / "vendor" / "llama.cpp"

    @property
    def build(self) -> Path:  # per version: a new pin never reuses an old CMakeCache
        return self.root / f"build-{LLAMA_CPP_PYTHON_VERSION}"

    @property
    def bin(self) -> Path:  # llama-server and the shared libraries
        return self.build / "bin"

    @property
    def server_bin(self) -> Path:
        return self.bin / "llama-server"

    @property
    def venv(self) -> Path:
        return self.root / f"venv-{LLAMA_CPP_PYTHON_VERSION}"

    @property
    def venv_python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def models(self) -> Path:
        return self.root / "models"

    @property
    def timings(self) -> Path:
        return self.root / "timings.json"


def layout(cache: Path | str | None = None) -> Layout:
    return Layout(Path(cache) if cache is not None else default_cache())


# --- building --------------------------------------------------------------------------------


def _run(
    cmd: Sequence[str | Path],
    *,
    nice: int,
    env: dict[str, str] | None = None,
    log: Path | None = None,
    cwd: Path | None = None,
) -> None:
    args = [str(c) for c in cmd]
    if nice:
        args = ["nice", "-n", str(nice), *args]
    out = log.open("ab") if log is not None else None
    try:
        proc = subprocess.run(
            args,
            env={**os.environ, **(env or {})},
            cwd=cwd,
            stdout=out or None,
            stderr=subprocess.STDOUT if out else None,
        )
    finally:
        if out is not None:
            out.close()
    if proc.returncode != 0:
        where = f" (log: {log})" if log else ""
        raise BuildError(f"{' '.join(args)} exited {proc.returncode}{where}")


def _record(lay: Layout, step: str, seconds: float) -> None:
    data = json.loads(lay.timings.read_text()) if lay.timings.is_file() else {}
    data[step] = round(seconds, 1)
    lay.timings.write_text(json.dumps(data, indent=2) + "\n")


def _step(lay: Layout, name: str, done: bool, action: Callable[[], None], log: Path | None = None) -> None:
    if done:
        print(f"[llama.cpp] {name}: up to date", file=sys.stderr)
        return
    print(f"[llama.cpp] {name} ..." + (f" (log: {log})" if log else ""), file=sys.stderr, flush=True)
    t0 = time.monotonic()
    action()
    _record(lay, name, time.monotonic() - t0)
    print(f"[llama.cpp] {name}: {time.monotonic() - t0:.0f} s", file=sys.stderr)


def download(lay: Layout, *, nice: int = 10) -> None:
    def act() -> None:
        lay.root.mkdir(parents=True, exist_ok=True)
        _run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-binary",
                ":all:",
                "--no-deps",
                "--quiet",
                f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}",
                "-d",
                lay.root,
            ],
            nice=nice,
        )

    _step(lay, "download", lay.sdist.is_file(), act)


def unpack(lay: Layout) -> None:
    def act() -> None:
        tmp = lay.src.parent / ".unpacking"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        with tarfile.open(lay.sdist) as tar:
            tar.extractall(tmp, filter="data")
        shutil.rmtree(lay.src, ignore_errors=True)
        (tmp / lay.src.name).rename(lay.src)
        tmp.rmdir()

    _step(lay, "unpack", (lay.llama_src / "CMakeLists.txt").is_file(), act)


def build_server(lay: Layout, *, jobs: int = 2, nice: int = 10) -> None:
    log = lay.root / "build.log"

    def configure() -> None:
        gen = ["-G", "Ninja"] if shutil.which("ninja") else []
        _run(["cmake", "-S", lay.llama_src, "-B", lay.build, *gen, *CMAKE_FLAGS], nice=nice, log=log)

    def compile_() -> None:
        _run(["cmake", "--build", lay.build, "--target", "llama-server", "-j", str(jobs)], nice=nice, log=log)

    _step(lay, "configure", (lay.build / "CMakeCache.txt").is_file(), configure, log)
    # always handed to cmake: a no-op (a second or two) when nothing changed
    _step(lay, "compile llama-server", False, compile_, log)
    if not lay.server_bin.is_file() or not (lay.bin / "libllama.so").is_file():
        raise BuildError(f"{lay.server_bin} or libllama.so missing after the build (log: {log})")


def install_python_server(lay: Layout, *, nice: int = 10) -> None:
    marker = lay.venv / f".llama-cpp-python-{LLAMA_CPP_PYTHON_VERSION}"
    log = lay.root / "pip.log"

    def act() -> None:
        shutil.rmtree(lay.venv, ignore_errors=True)
        _run([sys.executable, "-m", "venv", lay.venv], nice=nice)
        # LLAMA_BUILD=OFF: a pure-Python wheel; the library comes from build/bin
        _run(
            [lay.venv_python, "-m", "pip", "install", "--quiet", f"{lay.sdist}[server]"],
            nice=nice,
            env={"CMAKE_ARGS": "-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF"},
            log=log,
        )
        marker.write_text("")

    _step(lay, "install llama-cpp-python[server]", marker.is_file(), act, log)


def build(
    cache: Path | str | None = None, *, jobs: int = 2, nice: int = 10, kinds: Sequence[Kind] = KINDS
) -> Layout:
    lay = layout(cache)
    download(lay, nice=nice)
    unpack(lay)
    build_server(lay, jobs=jobs, nice=nice)  # both kinds need libllama.so
    if "llama-cpp-python" in kinds:
        install_python_server(lay, nice=nice)
    return lay


def available(kind: Kind, cache: Path | str | None = None) -> str | None:
    """None when ``kind`` is built and ready to start, else the reason (for pytest.skip)."""
    lay = layout(cache)
    if not lay.server_bin.is_file() or not (lay.bin / "libllama.so").is_file():
        return f"llama.cpp is not built in {lay.root}: python -m tests.servers.llama_cpp build"
    if kind == "llama-cpp-python" and not lay.venv_python.is_file():
        return f"llama-cpp-python is not installed in {lay.venv}: python -m tests.servers.llama_cpp build"
    return None
