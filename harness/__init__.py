"""Batch-position quality regression harness for TensorRT-LLM-style engines."""

from __future__ import annotations

__version__ = "0.1.0"
