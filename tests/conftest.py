"""Shared fixtures: small datasets and engines built from the bundled model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.doubles.openai_server import behaving  # noqa: E402,F401 (a fixture: a test double of a server)

REPO = Path(__file__).resolve().parents[1]
SUITES = REPO / "suites"


@pytest.fixture(scope="session")
def small_dataset(tmp_path_factory) -> Path:
    """The first 16 bundled documents, as a user's JSONL file."""
    from harness.inputs.data import load_dataset

    path = tmp_path_factory.mktemp("data") / "small16.jsonl"
    docs = load_dataset(None).documents[:16]
    path.write_text("".join(json.dumps({"id": d.id, "text": d.text, "summary": d.summary}) + "\n"
                            for d in docs), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def engine_factory(tmp_path_factory):
    """build(max_batch_size, max_beam_width) -> engine directory (cached per session)."""
    from harness.engines.emulator.build import BuildLimits, build_engine

    root = tmp_path_factory.mktemp("engines")
    built: dict[tuple[int, int], Path] = {}

    def build(batch: int, beam: int) -> Path:
        if (batch, beam) not in built:
            built[(batch, beam)] = build_engine(root / f"bs{batch}-bw{beam}",
                                                BuildLimits(max_batch_size=batch, max_beam_width=beam))
        return built[(batch, beam)]

    return build


def run_suites(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`pytest suites/ ARGS` in a subprocess, as a user runs it."""
    full_env = {**os.environ, **(env or {})}
    # the checkout under test, not whichever copy of the harness is installed
    full_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), full_env.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, "-m", "pytest", str(SUITES), "-p", "no:cacheprovider",
                           *args], cwd=cwd, env=full_env, capture_output=True, text=True,
                          timeout=1800)


def only_report(report_dir: Path) -> dict:
    [path] = list(report_dir.glob("*/report.json"))
    return json.loads(path.read_text(encoding="utf-8"))
