"""pytest plugin for `pytest suites/` (``-p tests.doubles.use_tensorrt_llm_double``): installs one
TEST DOUBLE of ``tensorrt_llm`` before the suites load an engine: the release line named by
``TRTLLM_DOUBLE_LINE`` (``0.9``, ``0.12-0.13``, ``0.15-0.16``, ``1.x``; default the newest).
It is not TensorRT-LLM; see tests/doubles/lines.py and each line's module. In an in-process
run (pytester) the modules it puts into sys.modules go when the run ends."""

from __future__ import annotations

import os

import pytest

from tests.doubles.lines import ENV, NEWEST, line

line(os.environ.get(ENV, NEWEST)).install(pytest.MonkeyPatch())
