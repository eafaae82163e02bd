"""The run's options: each declared once, in ``run`` (``RunConfig``) or in a group it holds
(``engine``, ``dataset``, ``design``); read from text by ``parse``; tabled by ``option`` for the CLI, the
pytest plugin and docs/options.md. What the options share (the default grid, the cache folder)
is in ``basics``."""

from harness.config.dataset import DatasetOptions
from harness.config.decoding import DecodingSettings
from harness.config.design import DesignOptions
from harness.config.engine import OPENAI_KEY_VARIABLE, EngineOptions
from harness.config.option import Option
from harness.config.parse import (
    RESERVED_FIELDS,
    RequestFields,
    check_template,
    merge_request_fields,
    non_negative_int,
    non_negative_real,
    parse_size,
    positive_int,
    real,
)
from harness.config.run import OPTIONS, RunConfig, find_option, read_by

__all__ = [
    "OPENAI_KEY_VARIABLE",
    "OPTIONS",
    "RESERVED_FIELDS",
    "DatasetOptions",
    "DecodingSettings",
    "DesignOptions",
    "EngineOptions",
    "Option",
    "RequestFields",
    "RunConfig",
    "check_template",
    "find_option",
    "merge_request_fields",
    "non_negative_int",
    "non_negative_real",
    "parse_size",
    "positive_int",
    "read_by",
    "real",
]
