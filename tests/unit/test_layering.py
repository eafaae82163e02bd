"""The measurement model is the ground floor, and what reads it stays light: importing the
statistics or the report readers loads no engine, storage or orchestration code."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def _loaded(module: str) -> set[str]:
    """The harness modules a fresh interpreter holds after importing ``module``."""
    code = (
        f"import sys, json, {module}; "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('harness'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout))


def test_the_model_imports_nothing_of_the_harness_but_itself() -> None:
    for module in ("harness.model.report", "harness.model.analysis", "harness.model.limits"):
        assert {m for m in _loaded(module) if not m.startswith("harness.model")} == {"harness"}


@pytest.mark.parametrize(
    "module",
    [
        "harness.verdict.analysis",
        "harness.report.compare",
        "harness.report.serialize",
        "harness.verdict.failures",
    ],
)
def test_readers_of_the_model_load_no_engine_storage_or_stage(module: str) -> None:
    loaded = _loaded(module)
    heavy = {
        m
        for m in loaded
        if m.startswith(
            (
                "harness.engines",
                "harness.storage",
                "harness.stages",
                "harness.pipeline",
                "harness.inputs",
                "harness.config",
            )
        )
    }
    assert not heavy, f"{module} loads {sorted(heavy)}"
