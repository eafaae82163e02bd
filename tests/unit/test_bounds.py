"""Issue 15, classes 6 (nesting) and 7 (numbers): every number is bounded where it is parsed,
naming the option or config.json key, and JSON from outside is bounded in depth."""

from __future__ import annotations

import argparse
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.__main__ import main
from harness.config import OPTIONS, RunConfig
from harness.errors import ConfigError, EngineError
from harness.limits.engine_config import parse_config, read_engine_config
from harness.model.json import JsonObject
from harness.tools.lint import lint


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--batch-timeout", "1e10"),
        ("--request-timeout", "1e10"),
        ("--length-penalty", "1e308"),
        ("--length-penalty", "-1e308"),
        ("--max-new-tokens", "1000000000"),
        ("--retries", "1000000"),
        ("--batch-sizes", "1,100000000"),
        ("--beam-widths", "100000"),
        ("--end-id", str(1 << 40)),
    ],
)
def test_run_options_are_bounded_where_parsed(flag: str, value: str) -> None:
    spec = next(s for s in OPTIONS if s.flag == flag)
    with pytest.raises(
        argparse.ArgumentTypeError,
        match=f"{flag} '{value}': .*must be at most"
        if not value.startswith("-")
        else f"{flag} '{value}': must be at least",
    ):
        spec.type(value)  # type: ignore[misc]
    with pytest.raises(ConfigError, match=flag):  # the same parser for ini values and notebooks
        RunConfig.from_options({spec.dest: value})


def test_values_inside_the_bounds_still_parse() -> None:
    values = {
        "batch_timeout": "86400",
        "length_penalty": "-10",
        "max_new_tokens": "65536",
        "batch_sizes": "1,65536",
    }
    cfg = RunConfig.from_options(values)
    assert (cfg.batch_timeout, cfg.length_penalty, cfg.max_new_tokens) == (86400, -10, 65536)


def test_serve_port_range_is_checked_by_the_parser(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["serve", "--port", "99999"])
    assert exc.value.code == 2
    assert "--port '99999': must be at most 65535" in capsys.readouterr().err


def _engine_with(tmp_path: Path, engine: Path, change: Callable[[dict[str, Any]], object]) -> Path:
    folder = tmp_path / "engine"
    shutil.copytree(engine, folder)
    config = json.loads((folder / "config.json").read_text())
    change(config)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize(
    "key, value", [("max_batch_size", 10**20), ("max_beam_width", 10**6), ("max_seq_len", 2**40)]
)
def test_build_limits_are_bounded_and_lint_says_so(
    tmp_path: Path, engine_factory: Callable[[int, int], Path], key: str, value: int
) -> None:
    folder = _engine_with(tmp_path, engine_factory(8, 4), lambda c: c["build_config"].__setitem__(key, value))
    words = f"config.json: build_config.{key} is {value}, above"
    with pytest.raises(EngineError, match=words):
        read_engine_config(folder)
    with pytest.raises(EngineError, match=words):  # lint refuses it too, with the same words
        lint(folder)


def test_config_floats_must_be_finite() -> None:
    config: JsonObject = {
        "build_config": {"max_batch_size": 8, "max_beam_width": 1, "max_input_len": 8, "max_seq_len": 16},
        "pretrained_config": {"rope_theta": 1e400},
    }
    parse_config(config)  # rope_theta is not read by parse_config
    from harness.limits.engine_config import ConfigSection

    with pytest.raises(EngineError, match="rope_theta must be a finite number"):
        ConfigSection(config["pretrained_config"], "config.json", "pretrained_config").number("rope_theta")


def _nested(depth: int) -> str:
    return '{"build_config": ' + "[" * depth + "]" * depth + "}"


@pytest.mark.parametrize("depth", [100, 100_000])
def test_deeply_nested_config_is_one_error_in_lint(
    tmp_path: Path, depth: int, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "nested"
    folder.mkdir()
    (folder / "config.json").write_text(_nested(depth))
    with pytest.raises(EngineError, match="config.json: nested deeper than 64 levels"):
        read_engine_config(folder)
    assert main(["lint", str(folder)]) == 2
    err = capsys.readouterr().err
    assert "nested deeper than 64 levels" in err and "Traceback" not in err


def test_deeply_nested_report_is_one_error_in_compare(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "report.json"
    report.write_text('{"schema_version": 1, "cells": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert main(["compare", str(report), str(report)]) == 2
    err = capsys.readouterr().err
    assert "nested deeper than 64 levels" in err and len(err.strip().splitlines()) == 1
