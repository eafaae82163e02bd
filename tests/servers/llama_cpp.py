"""Real third-party OpenAI-compatible servers for tests: llama.cpp's ``llama-server`` and
``llama-cpp-python[server]``, built from one llama-cpp-python source distribution.

    python -m tests.servers.llama_cpp build   [--cache DIR] [--jobs 2] [--nice 10]
    python -m tests.servers.llama_cpp convert [MODEL_DIR] [--cache DIR]       # prints the GGUF path
    python -m tests.servers.llama_cpp serve KIND [--parallel 4] [--port 8000] # until Ctrl-C

``build`` (idempotent; each step is skipped when its output is there) downloads the pinned
sdist from PyPI, builds the ``llama-server`` target of its ``vendor/llama.cpp`` with shared
libraries (so ``libllama.so`` comes out of the same build), and installs the Python package
with ``-DLLAMA_BUILD=OFF`` into a venv of its own: the Python server then loads that
``libllama.so`` (``LLAMA_CPP_LIB_PATH``), so llama.cpp is compiled once for both servers.
The cache is ``--cache``, else ``$HARNESS_LLAMA_CPP_CACHE``, else
``$XDG_CACHE_HOME/batch-position-harness/llama.cpp`` (``~/.cache`` without XDG_CACHE_HOME).

From Python (a pytest fixture)::

    from tests.servers import llama_cpp
    gguf = llama_cpp.convert(BUNDLED_MODEL)            # cached by content
    with llama_cpp.start("llama-server", gguf, parallel=4) as server:
        server.base_url                                # "http://127.0.0.1:PORT/v1"
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.servers.llama_cpp_build import KINDS as KINDS
from tests.servers.llama_cpp_build import LLAMA_CPP_PYTHON_VERSION as LLAMA_CPP_PYTHON_VERSION
from tests.servers.llama_cpp_build import BuildError as BuildError
from tests.servers.llama_cpp_build import Kind as Kind
from tests.servers.llama_cpp_build import Layout as Layout
from tests.servers.llama_cpp_build import available as available
from tests.servers.llama_cpp_build import build as build
from tests.servers.llama_cpp_build import default_cache as default_cache
from tests.servers.llama_cpp_build import layout as layout

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
BUNDLED_MODEL = REPO / "harness" / "bundled" / "model"


# --- converting ------------------------------------------------------------------------------


def _digest(paths: Sequence[Path], seed: str = "") -> str:
    h = hashlib.sha256(seed.encode())
    for path in paths:
        h.update(path.name.encode())
        with path.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()[:16]


def model_digest(model_dir: Path) -> str:
    """Content hash of a model folder's files (what the recorded fixtures were made with)."""
    return _digest(sorted(p for p in Path(model_dir).iterdir() if p.is_file()))


def gguf_name(model_dir: Path, outtype: str = "f32") -> str:
    """The converted file's name: the model's content, the conversion code and the sdist."""
    code = _digest([HERE / "convert_gguf.py", HERE / "gguf_vocab.py"], LLAMA_CPP_PYTHON_VERSION)
    return f"{Path(model_dir).name}-{model_digest(model_dir)}-{code[:8]}-{outtype}.gguf"


def convert(
    model_dir: Path = BUNDLED_MODEL,
    cache: Path | str | None = None,
    *,
    outtype: str = "f32",
    python: str = sys.executable,
) -> Path:
    """The GGUF of ``model_dir`` (converted once per content, under the cache's models/)."""
    lay = layout(cache)
    if not (lay.llama_src / "convert_hf_to_gguf.py").is_file():
        raise BuildError(f"no llama.cpp source in {lay.root}: python -m tests.servers.llama_cpp build")
    model_dir = Path(model_dir).resolve()
    out = lay.models / gguf_name(model_dir, outtype)
    if out.is_file():
        return out
    lay.models.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".partial")
    log = out.with_suffix(".log")
    with log.open("wb") as f:
        proc = subprocess.run(
            [
                python,
                str(HERE / "convert_gguf.py"),
                "--llama-cpp",
                str(lay.llama_src),
                "--outtype",
                outtype,
                str(model_dir),
                str(tmp),
            ],
            stdout=f,
            stderr=subprocess.STDOUT,
        )
    if proc.returncode != 0:
        raise BuildError(f"converting {model_dir} failed: {log.read_text(errors='replace')[-2000:]}")
    tmp.rename(out)
    return out


# --- running ---------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    """A started server; ``stop()`` (or leaving the ``with`` block) ends it."""

    kind: Kind
    base_url: str  # ".../v1"
    model: str  # the alias served in /v1/models
    parallel: int
    process: subprocess.Popen[bytes]
    log_path: Path
    command: list[str] = field(default_factory=list)

    @property
    def root_url(self) -> str:
        return self.base_url.removesuffix("/v1")

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = 15.0) -> int:
        """SIGINT (both shut down cleanly on it), then SIGKILL after ``timeout`` s; the exit code."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(5)
        return int(self.process.returncode)

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def server_command(
    kind: Kind,
    lay: Layout,
    gguf: Path,
    port: int,
    *,
    parallel: int,
    alias: str,
    ctx_per_slot: int,
    threads: int,
    n_predict: int | None,
    extra_args: Sequence[str] = (),
) -> list[str]:
    # both servers take the model and the address by the same names
    listen = ["--model", str(gguf), "--host", "127.0.0.1", "--port", str(port)]
    if kind == "llama-server":
        cmd = [
            str(lay.server_bin),
            *listen,
            "--parallel",
            str(parallel),
            "--ctx-size",
            str(ctx_per_slot * parallel),
            "--alias",
            alias,
            "--threads",
            str(threads),
            "--threads-batch",
            str(threads),
            "--no-webui",
        ]
        if n_predict is not None:
            cmd += ["--n-predict", str(n_predict)]
        return [*cmd, *extra_args]
    if kind == "llama-cpp-python":
        # one model, one lock: parallel has no equivalent (it answers one request at a time)
        if extra_args:
            raise ValueError(f"extra_args {list(extra_args)!r} are llama-server's flags, not {kind}'s")
        return [
            str(lay.venv_python),
            "-m",
            "llama_cpp.server",
            *listen,
            "--model_alias",
            alias,
            "--n_ctx",
            str(ctx_per_slot),
            "--n_threads",
            str(threads),
            "--n_threads_batch",
            str(threads),
        ]
    raise ValueError(f"unknown server kind {kind!r}; one of {', '.join(KINDS)}")


def start(
    kind: Kind,
    gguf: Path,
    parallel: int = 1,
    *,
    alias: str = "bundled",
    ctx_per_slot: int = 512,
    threads: int = 1,
    n_predict: int | None = None,
    port: int | None = None,
    cache: Path | str | None = None,
    timeout: float = 120.0,
    log_dir: Path | None = None,
    extra_args: Sequence[str] = (),
) -> Server:
    """Start ``kind`` on a free loopback port; returns once ``GET /v1/models`` answers 200.
    ``extra_args``: more of llama-server's flags, after the ones set here (``["--kv-unified"]``).

    ``threads`` defaults to 1: ggml's worker threads spin while they wait for each other, and
    with 2 threads on this 2-core machine any other busy process made 16 short requests take
    35 s instead of 0.9 s (measured, llama-server). The bundled model gains nothing from 2.
    """
    lay = layout(cache)
    if (reason := available(kind, cache)) is not None:
        raise BuildError(reason)
    log_dir = log_dir or lay.root / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    last = ""
    for _attempt in range(3):  # a port taken between free_port() and bind() is tried again
        p = port or free_port()
        cmd = server_command(
            kind,
            lay,
            Path(gguf),
            p,
            parallel=parallel,
            alias=alias,
            ctx_per_slot=ctx_per_slot,
            threads=threads,
            n_predict=n_predict,
            extra_args=extra_args,
        )
        log_path = log_dir / f"{kind}-{p}.log"
        env = {**os.environ, "LLAMA_CPP_LIB_PATH": str(lay.bin)}
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        server = Server(kind, f"http://127.0.0.1:{p}/v1", alias, parallel, proc, log_path, cmd)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and server.alive():
            try:
                with urllib.request.urlopen(f"{server.base_url}/models", timeout=5) as r:
                    if r.status == 200:
                        return server
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        last = server.log_tail()
        server.stop()
        if port is not None or "address already in use" not in last.lower():
            break
    raise BuildError(f"{kind} did not answer GET /v1/models within {timeout:g} s:\n{last}")


# --- command line ----------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.servers.llama_cpp", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--cache", type=Path, default=None, help=f"cache folder (default {default_cache()})")
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="download, build llama-server, install llama-cpp-python")
    b.add_argument("--jobs", type=int, default=2)
    b.add_argument("--nice", type=int, default=10)
    b.add_argument("--only", choices=KINDS, default=None)
    c = sub.add_parser("convert", help="GGUF of a transformers model folder (prints its path)")
    c.add_argument("model_dir", type=Path, nargs="?", default=BUNDLED_MODEL)
    s = sub.add_parser("serve", help="start a server and wait for Ctrl-C")
    s.add_argument("kind", choices=KINDS)
    s.add_argument("--model-dir", type=Path, default=BUNDLED_MODEL)
    s.add_argument("--parallel", type=int, default=4)
    s.add_argument("--port", type=int, default=None)
    s.add_argument("--alias", default="bundled")
    args = parser.parse_args(argv)

    if args.cmd == "build":
        lay = build(args.cache, jobs=args.jobs, nice=args.nice, kinds=(args.only,) if args.only else KINDS)
        print(json.dumps(json.loads(lay.timings.read_text()) if lay.timings.is_file() else {}))
        return 0
    if args.cmd == "convert":
        print(convert(args.model_dir, args.cache))
        return 0
    gguf = convert(args.model_dir, args.cache)
    server = start(args.kind, gguf, args.parallel, alias=args.alias, port=args.port, cache=args.cache)
    print(
        f"{args.kind} serving {gguf.name} at {server.base_url} (model {server.model!r}, "
        f"log {server.log_path}); Ctrl-C stops it",
        flush=True,
    )
    try:
        server.process.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
