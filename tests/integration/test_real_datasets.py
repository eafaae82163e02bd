"""A JSONL, a CSV and a save_to_disk dataset with custom field names, a hub dataset from the
local cache, --num-prompts and --chat, each run end to end on a small emulator engine.

The file datasets run through `pytest suites/` in this process (pytester); the hub dataset
through `python -m harness run` in a subprocess, as `datasets` reads HF_DATASETS_CACHE and
HF_DATASETS_OFFLINE when it is imported."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from harness.inputs.data import content_hash, load_dataset, select_subset
from harness.model.dataset import Document
from tests.conftest import only_report
from tests.hub_cache import cache_hub_dataset
from tests.integration.common import EngineFactory, Suites, cli_options, run_options
from tests.processes import run_harness

SCHEMA = Path(__file__).resolve().parents[2] / "harness" / "report" / "report.schema.json"
FAST = ("--batch-sizes", "1,2", "--beam-widths", "1", "--max-new-tokens", "8", "--no-cache")
N = 8


@pytest.fixture(scope="module")
def documents() -> tuple[Document, ...]:
    return load_dataset(None).documents[:N]


def _rows(docs: Sequence[Document], text: str, summary: str, key: str = "id") -> list[dict[str, str | None]]:
    return [{key: d.id, text: d.text, summary: d.summary} for d in docs]


def _check(report: dict[str, Any], docs: Sequence[Document], **expected: object) -> None:
    import jsonschema

    jsonschema.validate(report, json.loads(SCHEMA.read_text()))
    ds = report["dataset"]
    for key, value in expected.items():
        assert ds[key] == value, (key, ds)
    assert ds["count"] == len(docs) and ds["hash"] == content_hash(list(docs))
    assert report["verdict"] == "pass"
    assert {c["id"] for c in report["cells"]} == {"bs1-beam1", "bs2-beam1"}
    assert all(p["agreement"] == 1.0 for c in report["cells"] for p in c["positions"])


def _suites_report(
    suites: Suites, engine: Path, dataset: Path, fields: tuple[str, str], report_dir: Path, *more: str
) -> dict[str, Any]:
    """The report of a passing `pytest suites/` run of ``engine`` on ``dataset``, whose
    ``fields`` (text, summary) hold the texts."""
    text, summary = fields
    fields_given = ("--text-field", text, "--summary-field", summary)
    proc = suites(*cli_options(engine, dataset, report_dir), *fields_given, *more, *FAST)
    assert proc.returncode == 0, proc.stdout[-3000:]
    return only_report(report_dir)


def test_jsonl_with_custom_fields(
    tmp_path: Path, engine_factory: EngineFactory, documents: tuple[Document, ...], suites: Suites
) -> None:
    path = tmp_path / "news.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _rows(documents, "body", "abstract")))
    report = _suites_report(suites, engine_factory(2, 1), path, ("body", "abstract"), tmp_path / "r")
    fields = {"text_field": "body", "summary_field": "abstract"}  # the names the run was given
    _check(report, documents, source="file", name="news", split=None, subset=None, **fields)


def test_csv_with_custom_fields(
    tmp_path: Path, engine_factory: EngineFactory, documents: tuple[Document, ...], suites: Suites
) -> None:
    import datasets

    path = tmp_path / "news.csv"
    datasets.Dataset.from_list(_rows(documents, "article", "highlights")).to_csv(str(path), index=False)
    report = _suites_report(suites, engine_factory(2, 1), path, ("article", "highlights"), tmp_path / "r")
    _check(report, documents, source="file", text_field="article", summary_field="highlights")


def test_save_to_disk_with_custom_fields_split_and_subset(
    tmp_path: Path, engine_factory: EngineFactory, documents: tuple[Document, ...], suites: Suites
) -> None:
    import datasets

    folder = tmp_path / "saved"
    datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_list(_rows(documents[:3], "dialogue", "gist")),
            "eval": datasets.Dataset.from_list(_rows(documents, "dialogue", "gist")),
        }
    ).save_to_disk(str(folder))
    chosen_by = ("--split", "eval", "--num-prompts", "6", "--seed", "5")
    report = _suites_report(
        suites, engine_factory(2, 1), folder, ("dialogue", "gist"), tmp_path / "r", *chosen_by
    )
    full = load_dataset(str(folder), split="eval", text_field="dialogue", summary_field="gist")
    chosen = select_subset(full, 6, 5)
    _check(report, chosen.documents, source="disk", split="eval", name="saved-eval-n6-seed5")
    subset = report["dataset"]["subset"]
    assert subset["ids"] == [d.id for d in chosen.documents] and len(subset["ids"]) == 6
    assert subset["hash"] == report["dataset"]["hash"] and subset["source_hash"] == full.info.hash
    assert (subset["num_prompts"], subset["seed"], subset["of"]) == (6, 5, N)
    rows = [
        json.loads(x) for x in next((tmp_path / "r").glob("*/generations.jsonl")).read_text().splitlines()
    ]
    assert {r["id"] for r in rows} == set(subset["ids"])


@pytest.mark.slow  # two `python -m harness run` processes
def test_hub_dataset_from_the_local_cache_and_the_not_cached_message(
    tmp_path: Path, engine_factory: EngineFactory, documents: tuple[Document, ...]
) -> None:
    """The CLI, offline, reads a hub dataset from HF_DATASETS_CACHE; an uncached one is one line."""
    cache = tmp_path / "hf"
    cache_hub_dataset(cache, "newsums", "v1", {"test": _rows(documents, "document", "summary")})
    env = {"HF_DATASETS_CACHE": str(cache), "HF_DATASETS_OFFLINE": "1"}
    args = ["run", "--engine", str(engine_factory(2, 1)), "--report-dir", str(tmp_path / "r"), *FAST]
    hub = ("--dataset", "newsums", "--dataset-config", "v1", "--text-field", "document")
    proc = run_harness(*args, *hub, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = only_report(tmp_path / "r")
    _check(report, documents, source="hub", config="v1", split="test", name="newsums-v1-test")

    proc = run_harness(*args, "--dataset", "cnn_dailymail", cwd=tmp_path, env=env)
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith(
        "error: --dataset cnn_dailymail: abisee/cnn_dailymail (config 3.0.0, "
        "split test) is not in the local datasets cache"
    )
    assert "datasets.load_dataset('abisee/cnn_dailymail', '3.0.0', split='test')" in line


def test_chat_template_prompts_reach_the_engine(
    tmp_path: Path, engine_factory: EngineFactory, small_dataset: Path
) -> None:
    from transformers import PreTrainedTokenizerBase

    from harness.config import RunConfig
    from harness.engines.emulator.engine import EmulatorEngine

    engine = EmulatorEngine(engine_factory(2, 1))
    tokenizer = engine.tokenizer
    assert isinstance(tokenizer, PreTrainedTokenizerBase)
    tokenizer.chat_template = (
        "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n"
        "{% endfor %}{% if add_generation_prompt %}[assistant] {% endif %}"
    )
    # bulk cells only: four 4-token requests in flight may finish before the next arrives, an
    # untested schedule that fails the run for a reason that is not this test's
    options = run_options(
        tmp_path, small_dataset, "1,2", goldens="g", cache=False, max_new_tokens="4", schedules="none"
    )
    config = RunConfig.from_options({**options, "num_prompts": "4", "chat": True})
    from harness.pipeline import RunOutcome, execute, prepare

    prep = prepare(config, engine=engine)
    docs = prep.dataset.documents
    assert prep.prompts == tuple(f"[user] {d.text} TL;DR: \n[assistant] " for d in docs)
    result = execute(prep)
    assert isinstance(result, RunOutcome)
    assert result.report.verdict == "pass"
    report = json.loads((result.folder / "report.json").read_text())
    assert report["options"]["chat"] is True and report["dataset"]["subset"]["num_prompts"] == 4
