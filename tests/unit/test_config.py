from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from harness.bounds import Range
from harness.config import RunConfig
from harness.config.parse import fraction, positive_int, positive_int_list, shard
from harness.errors import ConfigError


@pytest.mark.parametrize("value, expected", [("1,2,4,8", (1, 2, 4, 8)), ("8,1", (1, 8)), ("4", (4,))])
def test_positive_int_list_accepts(value: str, expected: tuple[int, ...]) -> None:
    assert positive_int_list("--batch-sizes")(value) == expected


@pytest.mark.parametrize(
    "value, words",
    [
        ("0", "at least 1"),
        ("-2", "at least 1"),
        ("a", "not an integer"),
        ("1,,2", "comma-separated"),
        ("", "comma-separated"),
        ("2,2", "given twice"),
        ("1.5", "not an integer"),
    ],
)
def test_positive_int_list_rejects_with_option_name(value: str, words: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as exc:
        positive_int_list("--batch-sizes")(value)
    assert "--batch-sizes" in str(exc.value) and words in str(exc.value)


def test_scalar_parsers_name_the_option() -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="--max-new-tokens"):
        positive_int("--max-new-tokens")("0")
    with pytest.raises(argparse.ArgumentTypeError, match=r"--alpha.*\(0.0, 0.5\]"):
        fraction("--alpha", Range(0.0, 0.5, open_low=True))("0")
    with pytest.raises(argparse.ArgumentTypeError, match="--tolerance"):
        fraction("--tolerance", Range(0.0, 1.0))("nan")


def test_from_options_parses_strings_and_resolves_folders(tmp_path: Path) -> None:
    cfg = RunConfig.from_options({"batch_sizes": "8", "beam_widths": "4", "report_dir": "out"}, root=tmp_path)
    assert cfg.batch_sizes == (8,) and cfg.beam_widths == (4,)
    assert cfg.report_dir == tmp_path / "out" and cfg.goldens_dir == tmp_path / "goldens"
    assert cfg.decoding(4).beam_width == 4


def test_from_options_errors() -> None:
    with pytest.raises(ConfigError, match="--beam-widths"):
        RunConfig.from_options({"beam_widths": "0"})
    with pytest.raises(ConfigError, match=r"--prompt-template.*\{text\}"):
        RunConfig.from_options({"prompt_template": "Summarize:"})
    with pytest.raises(ConfigError, match="--update-goldens"):
        RunConfig.from_options({"golden_engine": "x"})


@pytest.mark.parametrize(
    "value, expected", [("1/2", (1, 2)), ("3/3", (3, 3)), (" 2 / 5 ", (2, 5)), ("1/1", (1, 1))]
)
def test_shard_accepts(value: str, expected: tuple[int, int]) -> None:
    assert shard("--shard")(value) == expected
    assert RunConfig.from_options({"shard": value}).shard == expected


@pytest.mark.parametrize(
    "value, words",
    [
        ("0/2", "between 1 and N (2)"),
        ("3/2", "between 1 and N (2)"),
        ("1/0", "N must be at least 1"),
        ("1", "expected K/N"),
        ("a/b", "expected K/N"),
        ("-1/2", "expected K/N"),
        ("1/2/3", "expected K/N"),
    ],
)
def test_shard_rejects_with_option_name(value: str, words: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as exc:
        shard("--shard")(value)
    assert "--shard" in str(exc.value) and words in str(exc.value)
    with pytest.raises(ConfigError, match="--shard"):
        RunConfig.from_options({"shard": value})


def test_shard_is_recorded_and_excludes_recording_goldens() -> None:
    assert RunConfig.from_options({"shard": "2/3"}).as_dict()["shard"] == "2/3"
    assert RunConfig().as_dict()["shard"] is None
    with pytest.raises(ConfigError, match="--update-goldens.*without --shard"):
        RunConfig.from_options({"shard": "1/2", "update_goldens": True})


@pytest.mark.parametrize("xdg, expected", [(None, "home/.cache"), ("", "home/.cache"), ("/xdg", "/xdg")])
def test_one_cache_root_where_an_empty_xdg_cache_home_is_unset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, xdg: str | None, expected: str
) -> None:
    """The run's generation cache, the bundled engine and calibrate's engines share one root;
    XDG_CACHE_HOME="" counts as unset (the bundled engine used to land in the working folder)."""
    from harness.config.basics import harness_cache_dir
    from harness.engines.emulator import build

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    if xdg is None:
        monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    else:
        monkeypatch.setenv("XDG_CACHE_HOME", xdg)
    root = (
        tmp_path / expected if not expected.startswith("/") else Path(expected)
    ) / "batch-position-harness"
    assert harness_cache_dir() == root
    assert harness_cache_dir({"XDG_CACHE_HOME": ""}) == tmp_path / "home/.cache/batch-position-harness"
    assert RunConfig().cache_dir == root / "generations"
    built: list[Path] = []
    monkeypatch.setattr(build, "build_engine", lambda path, limits: built.append(path))
    engine = build.bundled_engine()
    assert engine.parent == root and built == [engine]


def test_calibrate_takes_the_run_options_parsers_and_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    """calibrate's --tolerance, --alpha, --max-new-tokens, --seed ... are the run's options:
    the same ranges (--alpha used to accept up to 1) and RunConfig's defaults."""
    import harness.__main__ as cli
    import harness.commands.calibrate as command

    seen: list[argparse.Namespace] = []

    def calibrate(args: argparse.Namespace) -> int:
        seen.append(args)
        return 0

    monkeypatch.setattr(command, "cmd_calibrate", calibrate)
    assert cli.main(["calibrate"]) == 0
    args, defaults = seen[0], RunConfig()
    for dest in ("seed", "max_new_tokens", "tolerance", "alpha", "cache_dir", "no_cache", "rotation"):
        assert getattr(args, dest) == getattr(defaults, dest), dest
    from harness.tools.calibrate.settings import Settings

    for dest in ("trials", "prompts", "pool", "rounds"):  # the measured defaults (docs/method.md)
        assert getattr(args, dest) == getattr(Settings(), dest), dest
    for bad in (["--alpha", "0.6"], ["--seed", "-1"], ["--rotation", "diagonal"]):
        with pytest.raises(SystemExit):
            cli.main(["calibrate", *bad])
    assert cli.main(["calibrate", "--alpha", "0.5", "--tolerance", "0.05"]) == 0
    assert (seen[1].alpha, seen[1].tolerance) == (0.5, 0.05)


def test_every_run_option_calibrate_shares_reaches_its_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """--follow-up and --looks were parsed and then dropped: calibrate ran the default design."""
    import harness.__main__ as cli
    import harness.tools.calibrate.run as calibration
    from harness.tools.calibrate.settings import SHARED, Settings

    got: list[Settings] = []

    def run_calibration(settings: Settings, say: object = None) -> tuple[list[object], list[object]]:
        got.append(settings)
        return [], []

    monkeypatch.setattr(calibration, "run_calibration", run_calibration)
    monkeypatch.setattr("harness.tools.calibrate.table.table", lambda *a: ([], True))
    given = ["--follow-up", "0", "--looks", "1", "--rotation", "sparse", "--seed", "7", "--alpha", "0.02"]
    assert cli.main(["calibrate", *given, "--no-cache"]) == 0
    [s] = got
    assert (s.follow_up, s.looks, s.rotation, s.seed, s.alpha, s.cache_dir) == (
        0.0,
        1,
        "sparse",
        7,
        0.02,
        None,
    )
    assert {"follow_up", "looks"} <= set(SHARED)


def test_the_options_page_lists_every_option_as_the_code_defines_it() -> None:
    """docs/options.md holds the table made from OPTIONS, as `python -m harness options`
    prints it: no option missing (as --length-penalty, --deterministic and --golden-engine
    once were), none stale."""
    from pathlib import Path

    from harness.config import OPTIONS
    from harness.tools.options_doc import generated_section, table

    page = (Path(__file__).resolve().parents[2] / "docs" / "options.md").read_text(encoding="utf-8")
    assert generated_section(page) == table(), "run: python -m harness options, paste into docs/options.md"
    for spec in OPTIONS:
        assert f"`{spec.flag}" in table()
