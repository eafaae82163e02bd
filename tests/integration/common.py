"""What several integration test modules share: the types of the fixtures of tests/conftest.py
(for annotations), and a small dataset cut from the first rows of another."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeAlias

from tests.conftest import SuitesRun
from tests.doubles.openai_server import BehavingServer

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
