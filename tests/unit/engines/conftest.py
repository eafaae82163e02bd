"""Fixtures of the engine-adapter tests: ``trt_line`` installs each TensorRT-LLM double in turn."""

from __future__ import annotations

from tests.doubles.lines import trt_line  # noqa: F401  (a fixture)
