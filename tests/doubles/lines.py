"""The per-release TEST DOUBLES of ``tensorrt_llm``, by release line, and a pytest fixture that
installs one. Each module's docstring says what it models and where it was read from."""

from __future__ import annotations

from types import ModuleType

import pytest

from tests.doubles import trtllm_0_9, trtllm_0_12, trtllm_0_15, trtllm_1_x

LINES: dict[str, ModuleType] = {m.LINE: m for m in (trtllm_0_9, trtllm_0_12, trtllm_0_15, trtllm_1_x)}
NEWEST = trtllm_1_x.LINE
ENV = "TRTLLM_DOUBLE_LINE"  # read by tests.doubles.use_tensorrt_llm_double in `pytest suites/` runs


def line(name: str) -> ModuleType:
    try:
        return LINES[name]
    except KeyError:
        raise KeyError(
            f"{ENV}={name!r}: no TensorRT-LLM double of that line; one of {', '.join(LINES)}"
        ) from None


@pytest.fixture(params=list(LINES))
def trt_line(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """Each release line's double in turn, installed as ``tensorrt_llm``."""
    module = line(request.param)
    module.install(monkeypatch)
    return module
