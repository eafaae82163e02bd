"""--shard K/N and ``merge``: shards merged equal the unsharded run, even where Holm's
correction over the whole run changes a shard's own verdict; mismatched shards are refused."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any, TypedDict

import pytest

from harness.__main__ import main
from harness.config import RunConfig
from harness.errors import ConfigError
from harness.pipeline import RunOutcome, run
from harness.report.merge import merge
from tests.integration.common import run_options
from tests.unit.noisy_engine import NoisyEngine, write_dataset

SCHEMA = Path(__file__).resolve().parents[2] / "harness" / "report" / "report.schema.json"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_dataset(tmp_path_factory.mktemp("data") / "noisy.jsonl")


def _run(
    tmp: Path, dataset: Path, *, shard: str | None = None, engine: NoisyEngine | None = None, **options: str
) -> Path:
    # the fixed design: merged shards equal the unsharded run (a sequential run's shards stop apart)
    values = {**run_options(tmp, dataset, "1,2,4,8", "1,2", report="reports", cache=None, looks=1), **options}
    if shard:
        values["shard"] = shard
    # run() adopts any object with generate(); harness annotates the parameter Engine (the full protocol)
    result = run(RunConfig.from_options(values), engine=engine or NoisyEngine())
    assert isinstance(result, RunOutcome)
    return result.folder


def _json(folder: Path) -> dict[str, Any]:
    report: dict[str, Any] = json.loads((folder / "report.json").read_text(encoding="utf-8"))
    return report


def _p_adjusted(report: dict[str, Any]) -> dict[tuple[str, int], float]:
    """Per position, the adjusted p of its tests whose drop exceeds the tolerance (the ones
    that can flag it)."""
    out: dict[tuple[str, int], float] = {}
    for c in report["cells"]:
        for p in c["positions"]:
            tests = [t for t in (p["position_test"], p["quality_test"]) if t and t["drop"] > 0.02]
            if tests:
                out[(c["id"], p["position"])] = min(t["p_adjusted"] for t in tests)
    return out


class Borderline(TypedDict):
    """The position Holm's correction decides (``key``), the unsharded run and its two shards."""

    key: tuple[str, int]
    whole: Path
    shards: list[Path]
    tmp: Path


@pytest.fixture(scope="module")
def borderline(tmp_path_factory: pytest.TempPathFactory, dataset: Path) -> Borderline:
    """alpha between a position's adjusted p in the whole run and in its shard: a shard counts
    the other shard's tests as clean (p = 1), so its Holm correction is at least as strict as
    the run's; here the run calls the position degraded and the shard alone does not."""
    probe = tmp_path_factory.mktemp("probe")
    whole = _p_adjusted(_json(_run(probe, dataset, alpha="0.5")))
    pick = None
    for k in (1, 2):
        for key, p in _p_adjusted(_json(_run(probe, dataset, alpha="0.5", shard=f"{k}/2"))).items():
            usable = whole[key] < p and math.sqrt(p * whole[key]) <= 0.5  # --alpha's range
            if usable and (pick is None or p / whole[key] > pick[1] / pick[2]):
                pick = (key, p, whole[key])
    assert pick is not None, "the test data gives no position whose verdict Holm could change"
    key, in_shard, in_run = pick
    alpha = math.sqrt(in_shard * in_run)
    tmp = tmp_path_factory.mktemp("runs")
    alpha_text = repr(alpha)  # by name: to mypy a **dict of strings could hold _run's engine
    return {
        "key": key,
        "whole": _run(tmp, dataset, alpha=alpha_text),
        "shards": [_run(tmp, dataset, shard=f"{k}/2", alpha=alpha_text) for k in (1, 2)],
        "tmp": tmp,
    }


def test_two_shards_merge_into_the_unsharded_report(
    borderline: Borderline, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    whole = _json(borderline["whole"])
    shards = [_json(s) for s in borderline["shards"]]
    assert sorted(c["id"] for s in shards for c in s["cells"]) == sorted(c["id"] for c in whole["cells"])
    cell_id, position = borderline["key"]
    # the whole run calls the position degraded; the shard alone (the other shard's tests
    # counted clean) does not, and merge, with every shard's p-values, decides as the run
    [own] = [c for s in shards for c in s["cells"] if c["id"] == cell_id]
    assert position not in own["degraded_positions"]
    [run_cell] = [c for c in whole["cells"] if c["id"] == cell_id]
    assert position in run_cell["degraded_positions"]

    code = main(["merge", *map(str, borderline["shards"]), "--output", str(tmp_path / "merged")])
    merged = _json(tmp_path / "merged")
    assert merged["cells"] == whole["cells"]  # positions, p-values, degraded, messages, examples
    assert merged["verdict"] == whole["verdict"] and code == (0 if whole["verdict"] == "pass" else 1)
    for key in ("baseline", "memory", "limits", "dataset"):
        assert merged[key] == whole[key], key
    assert merged["method"] == whole["method"] and merged["options"]["shard"] is None
    assert merged["shard"]["count"] == 2 and merged["timing"]["merged_shards"] == 2
    assert "scores" not in merged
    assert (tmp_path / "merged" / "generations.jsonl").read_text() == (
        borderline["whole"] / "generations.jsonl"
    ).read_text()
    assert f"merged 2 shards; verdict: {whole['verdict']}" in capsys.readouterr().out
    for name in ("report.md", "report.html"):
        assert (tmp_path / "merged" / name).stat().st_size > 0


def test_shard_and_merged_reports_follow_the_schema(borderline: Borderline, tmp_path: Path) -> None:
    import jsonschema

    from harness.report.serialize import to_json, verify

    schema = json.loads(SCHEMA.read_text())
    report, _ = merge(borderline["shards"])
    for doc in (to_json(report), *(_json(s) for s in borderline["shards"])):
        jsonschema.validate(doc, schema)
        assert verify(doc)
    shard = _json(borderline["shards"][0])
    assert shard["shard"]["index"] == 1 and shard["shard"]["count"] == 2
    assert set(shard["scores"]["cells"]) == {c["id"] for c in shard["cells"]}


def _copy(folder: Path, dst: Path) -> Path:
    shutil.copytree(folder, dst)
    return dst


def test_refuses_what_is_not_one_run(borderline: Borderline, dataset: Path, tmp_path: Path) -> None:
    s1, s2 = borderline["shards"]
    with pytest.raises(ConfigError, match=r"shard 1/2 given twice"):
        merge([s1, _copy(s1, tmp_path / "again")])
    with pytest.raises(ConfigError, match=r"shard\(s\) 2/2 missing"):
        merge([s1])
    with pytest.raises(ConfigError, match="not a shard report"):
        merge([s1, borderline["whole"]])
    other = _run(tmp_path, dataset, shard="2/2", alpha="0.3")
    with pytest.raises(ConfigError, match=r"differ in --alpha"):
        merge([s1, other])
    three = _run(tmp_path, dataset, shard="2/3", alpha=_json(s1)["options"]["alpha"])
    with pytest.raises(ConfigError, match=r"differ in shard count \(2 vs 3\)"):
        merge([s1, three])
    seeded = _run(tmp_path, dataset, shard="2/2", alpha=_json(s1)["options"]["alpha"], seed="7")
    with pytest.raises(ConfigError, match=r"differ in --seed \(0 vs 7\)"):
        merge([s1, seeded])
    other_data = write_dataset(tmp_path / "other.jsonl", count=20)
    moved = _run(tmp_path, other_data, shard="2/2", alpha=_json(s1)["options"]["alpha"])
    with pytest.raises(ConfigError, match="differ in dataset"):
        merge([s1, moved])


def test_refuses_edited_reports_and_different_baselines(
    borderline: Borderline, dataset: Path, tmp_path: Path
) -> None:
    s1, s2 = borderline["shards"]
    edited = _copy(s2, tmp_path / "edited")
    report = _json(edited)
    report["scores"]["levels"]["1"][0] = 0.5
    (edited / "report.json").write_text(json.dumps(report))
    with pytest.raises(ConfigError, match="changed after it was written"):
        merge([s1, edited])
    # another build of the engine: its batch-size-1 outputs differ from shard 1's
    rebuilt = _run(
        tmp_path, dataset, shard="2/2", alpha=_json(s1)["options"]["alpha"], engine=NoisyEngine(salt=1)
    )
    with pytest.raises(ConfigError, match=r"hold different outputs for bs1-beam1.*shared --cache-dir"):
        merge([s1, rebuilt])
    with pytest.raises(ConfigError, match="no report.json"):
        merge([s1, tmp_path / "nowhere"])


def test_cli_merge_errors_are_one_line(
    borderline: Borderline, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s1, _ = borderline["shards"]
    assert main(["merge", str(s1)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: shard(s) 2/2 missing") and "Traceback" not in err
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    assert main(["merge", *map(str, borderline["shards"]), "--output", str(tmp_path / "full")]) == 2
    assert "is not an empty folder" in capsys.readouterr().err
