"""Shared fixtures: small datasets and engines built from the bundled model."""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.doubles.openai_server import behaving  # noqa: E402,F401 (a fixture: a test double of a server)
from tests.processes import SUITES, XDIST_WORKER_ENV

pytest_plugins = ["pytester"]  # `pytest suites/` in this process: the `suites` fixture

# the user's cache as this process found it (pytester points HOME at a temporary folder)
USER_CACHE = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")


def pytest_configure(config: pytest.Config) -> None:
    """pytest-xdist (`-n auto`): each worker is one of N processes on N cores, so one torch
    thread each, also in the processes it starts (else the workers fight over the cores);
    the bundled engine is built once, before the workers start, not by two at once."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        if "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    elif getattr(config.option, "numprocesses", None):
        from harness.engines.emulator.build import bundled_engine

        bundled_engine()


@pytest.fixture(scope="session")
def small_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 16 bundled documents, as a user's JSONL file."""
    from harness.inputs.data import load_dataset

    path = tmp_path_factory.mktemp("data") / "small16.jsonl"
    docs = load_dataset(None).documents[:16]
    path.write_text(
        "".join(json.dumps({"id": d.id, "text": d.text, "summary": d.summary}) + "\n" for d in docs),
        encoding="utf-8",
    )
    return path


@pytest.fixture(scope="session")
def engine_factory(tmp_path_factory: pytest.TempPathFactory) -> Callable[[int, int], Path]:
    """build(max_batch_size, max_beam_width) -> engine directory (cached per session)."""
    from harness.engines.emulator.build import build_engine, build_limits

    root = tmp_path_factory.mktemp("engines")
    built: dict[tuple[int, int], Path] = {}

    def build(batch: int, beam: int) -> Path:
        if (batch, beam) not in built:
            built[(batch, beam)] = build_engine(
                root / f"bs{batch}-bw{beam}", build_limits(max_batch_size=batch, max_beam_width=beam)
            )
        return built[(batch, beam)]

    return build


def only_report(report_dir: Path) -> dict[str, Any]:
    [path] = list(report_dir.glob("*/report.json"))
    report: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return report


# What `pytest suites/` imports (hypothesis: its pytest plugin, at the end of every run),
# imported once before any in-process run: pytester drops the modules a run imported when it
# ends, numpy, torch, pyarrow or pandas cannot be imported twice in one process, and the rest
# would be imported (and assert-rewritten) again by every run.
PRELOAD = (
    "torch",
    "transformers",
    "datasets",
    "scipy.io",
    "matplotlib.pyplot",
    "matplotlib.backends.backend_agg",
    "matplotlib.backends.backend_svg",
    "PIL.Image",
    "hypothesis",
)
# `--engine module:Class` test engines that read their environment when imported: dropped
# before each in-process run, so each run imports them afresh, as a new process would
ENGINE_MODULES = ("toy_engine", "fault_engines", "rank_engine", "raises_on_import")


@pytest.fixture(scope="session")
def _harness_imported() -> None:
    import harness

    for name in PRELOAD:
        importlib.import_module(name)
    for module in pkgutil.walk_packages(harness.__path__, "harness."):
        try:
            importlib.import_module(module.name)
        except ImportError:  # an optional backend's library (tensorrt_llm): imported on use
            pass
    # the hf backend's model code, imported only when a model is loaded (a thousand modules,
    # torch's operator registrations among them, which fail when imported a second time)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir = Path(harness.__file__).parent / "bundled" / "model"
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir))
    model.generate(**tokenizer("a", return_tensors="pt"), max_new_tokens=1, do_sample=False)


@dataclass(frozen=True)
class SuitesRun:
    """An in-process `pytest suites/` run, read as a finished process: exit status, output."""

    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def suites(_harness_imported: None, pytester: pytest.Pytester) -> Callable[..., SuitesRun]:
    """run(*ARGS, env=..., path=..., suite=...): `pytest suites/ ARGS` (or ``suite``, a file of
    it) in this process (pytester), with ``env`` set and the folders in ``path`` importable for
    the run, as `run_suites` does in a subprocess. For checks of the plugin (exit status,
    output, report files); where the process itself is the point (signals, a crash, a
    launcher's environment) use run_suites."""

    def run(
        *args: str, env: dict[str, str] | None = None, path: Iterable[str | Path] = (), suite: Path = SUITES
    ) -> SuitesRun:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("XDG_CACHE_HOME", USER_CACHE)
            for name in XDIST_WORKER_ENV:  # a run of its own, not an xdist worker's
                mp.delenv(name, raising=False)
            for key, value in (env or {}).items():
                mp.setenv(key, value)
            for folder in path:
                mp.syspath_prepend(str(folder))
            for name in ENGINE_MODULES:
                mp.delitem(sys.modules, name, raising=False)
            result = pytester.runpytest_inprocess(
                str(suite),
                "-p",
                "no:cacheprovider",
                # the plugin was imported before this run, so pytest cannot rewrite its asserts
                "-W",
                "ignore::pytest.PytestAssertRewriteWarning",
                *args,
            )
        return SuitesRun(int(result.ret), "\n".join(result.outlines), "\n".join(result.errlines))

    return run
