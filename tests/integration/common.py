"""What several test modules share: the types of the fixtures of tests/conftest.py (for
annotations), a small dataset cut from the first rows of another, a run's options (on the
command line, or as RunConfig.from_options takes them) and a run of the pipeline in this
process."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

from tests.conftest import SuitesRun
from tests.doubles.openai_server import BehavingServer

if TYPE_CHECKING:
    from harness.config import RunConfig
    from harness.pipeline import RunOutcome

# engine_factory: build(max_batch_size, max_beam_width) -> an emulator engine directory
EngineFactory: TypeAlias = Callable[[int, int], Path]
# suites: run(*ARGS, env=..., path=..., suite=...) -> `pytest suites/ ARGS` in this process
Suites: TypeAlias = Callable[..., SuitesRun]
# behaving: start(**behaviour) -> a started test double of an OpenAI-compatible server
Behaving: TypeAlias = Callable[..., BehavingServer]


def first_rows(dataset: Path, path: Path, rows: int) -> Path:
    """``path``, written with the first ``rows`` lines of the JSONL file ``dataset``."""
    path.write_text("".join(dataset.read_text().splitlines(keepends=True)[:rows]))
    return path


def run_here(config: RunConfig, engine: object = None) -> RunOutcome:
    """``harness.pipeline.run`` in this process, rank 0 of a world of one: the whole result.
    ``engine``: the engine to use (else the config's), any object with ``generate``."""
    from harness.pipeline import RunOutcome, run

    # run() adopts any object with generate() (registry.adopt), though its annotation says Engine
    result = run(config, engine=engine)
    assert isinstance(result, RunOutcome)  # a FollowerRun comes only to ranks other than 0
    return result


def echo_engine(tmp: Path, name: str = "echo-engine") -> Path:
    """A folder engine for ``--backend fault_engines:CLASS``: it holds a weights file, so the
    generation cache is on."""
    folder = tmp / name
    folder.mkdir(exist_ok=True)
    (folder / "weights.bin").write_text("echo")
    return folder


def cli_options(engine: Path | str, dataset: Path | str, report_dir: Path) -> list[str]:
    """``--engine ENGINE --dataset DATASET --report-dir DIR``: what a run is, on the command line."""
    return ["--engine", str(engine), "--dataset", str(dataset), "--report-dir", str(report_dir)]


def run_options(
    tmp: Path,
    dataset: Path | None,
    batch_sizes: str | None,
    beam_widths: str | None = "1",
    *,
    report: str = "r",
    goldens: str = "goldens",
    cache: bool | None = True,
    **more: object,
) -> dict[str, object]:
    """A run as RunConfig.from_options takes it: ``dataset`` (None: the bundled one) over
    ``batch_sizes`` x ``beam_widths`` (None: the default grid's), its report under
    ``tmp / report``, its goldens in ``tmp / goldens`` and its generation cache in
    ``tmp / "cache"`` (``cache=False``: none; None: the default folder); ``more``: any other
    option."""
    values: dict[str, object] = {
        "dataset": None if dataset is None else str(dataset),
        "batch_sizes": batch_sizes,
        "beam_widths": beam_widths,
        "report_dir": str(tmp / report),
        "goldens_dir": str(tmp / goldens),
    }
    if cache is not None:
        values.update({"cache_dir": str(tmp / "cache")} if cache else {"no_cache": True})
    return {**values, **more}


def grid_options(dataset: Path | str, batch_sizes: str, beam_widths: str) -> list[str]:
    """``--dataset DATASET --batch-sizes SIZES --beam-widths WIDTHS``: what a run covers."""
    return ["--dataset", str(dataset), "--batch-sizes", batch_sizes, "--beam-widths", beam_widths]


def echo_options(tmp: Path, dataset: Path, batch_sizes: str) -> list[str]:
    """A run of the healthy fault engine (Echo) in an echo_engine folder at beam width 1, with
    its report, cache and goldens folders under ``tmp``."""
    return [
        "--engine",
        str(echo_engine(tmp)),
        "--backend",
        "fault_engines:Echo",
        *grid_options(dataset, batch_sizes, "1"),
        "--report-dir",
        str(tmp / "reports"),
        "--cache-dir",
        str(tmp / "cache"),
        "--goldens-dir",
        str(tmp / "goldens"),
    ]
