"""pytest plugin for subprocess runs (``-p tests.doubles.use_tensorrt_llm_double``): installs the
TEST DOUBLE of ``tensorrt_llm`` from ``tensorrt_llm_double.py`` before the suites load an
engine. It is not TensorRT-LLM; see that module's docstring for what it enforces."""

from __future__ import annotations

import pytest

from tests.doubles import tensorrt_llm_double

tensorrt_llm_double.install(pytest.MonkeyPatch())
