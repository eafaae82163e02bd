"""Bad input, the engine (issue #7): its directory, config.json, weights and tokenizer, and
the backend or module:Class that loads it; issue #15 adds engine modules and tokenizers that
raise or answer in the wrong shape, and configs nested too deep or beyond any engine. Each case
is refused in one line by `run` and by `pytest suites/` (``refused``, tests/integration/conftest.py);
a batch size above the engine's maximum is a failing test instead.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.__main__ import main
from tests.integration.common import EngineFactory, Suites
from tests.integration.conftest import Case, Setup, edit_json, refused
from tests.processes import SUITES


def _tokenizer_ships_code(marker: Path) -> Callable[[Path], None]:
    """The engine's tokenizer points at code in its folder, which would create ``marker``."""

    def change(folder: Path) -> None:
        tok = folder / "tokenizer"
        (tok / "evil.py").write_text(
            f"open({str(marker)!r}, 'w').write('ran')\n"
            "from transformers import PreTrainedTokenizerFast\n"
            "class EvilTokenizer(PreTrainedTokenizerFast):\n    pass\n"
        )
        edit_json(
            tok / "tokenizer_config.json",
            tokenizer_class="EvilTokenizer",
            auto_map={"AutoTokenizer": ["evil.EvilTokenizer", "evil.EvilTokenizer"]},
        )

    return change


def _nested_config(folder: Path) -> None:
    """config.json with one key nested 100,000 arrays deep (json.loads would recurse)."""
    text = (folder / "config.json").read_text()
    (folder / "config.json").write_text(
        '{"deep": ' + "[" * 100_000 + "]" * 100_000 + ", " + text.lstrip()[1:]
    )


def _pretrained(key: str, value: object) -> Callable[[dict[str, Any]], None]:
    return lambda c: c["pretrained_config"].__setitem__(key, value)


def _bigger_vocab(c: dict[str, Any]) -> None:
    c["pretrained_config"]["vocab_size"] += 1000


def _plugin(id: str, spec: str, *words: str, dataset: bool = False) -> Case:
    """A case whose engine is the module:Class ``spec`` (the test engines of tests/integration),
    run on the case's dataset when ``dataset``."""
    return Case(id, lambda s: ["--engine", spec, *(["--dataset", str(s.dataset)] if dataset else [])], words)


CASES = [
    # the engine directory and its config.json
    Case(
        "engine-missing",
        lambda s: ["--engine", str(s.tmp / "nope")],
        ("--engine", "nope: no such engine directory", "build-engine"),
    ),
    Case(
        "engine-not-a-directory",
        lambda s: ["--engine", str(s.regular_file())],
        ("--engine", "plain-file: is not a directory", "give an engine or model folder"),
    ),
    Case(
        "config-missing",
        lambda s: ["--engine", s.engine_copy(lambda f: (f / "config.json").unlink())],
        ("config.json: missing", "trtllm-build"),
    ),
    Case(
        "config-invalid-json",
        lambda s: ["--engine", s.engine_copy(lambda f: (f / "config.json").write_text("{oops"))],
        ("config.json: invalid JSON at line 1", "rebuild the engine"),
    ),
    Case(
        "config-not-an-object",
        lambda s: ["--engine", s.engine_copy(lambda f: (f / "config.json").write_text("[1, 2]"))],
        ("config.json: expected a JSON object at the top level",),
    ),
    Case(
        "config-limit-wrong-type",
        lambda s: [
            "--engine",
            s.config_copy(lambda c: c["build_config"].__setitem__("max_beam_width", "four")),
        ],
        ("config.json: build_config.max_beam_width must be a positive integer, found 'four'",),
    ),
    Case(
        "config-section-wrong-type",
        lambda s: ["--engine", s.config_copy(lambda c: c.__setitem__("pretrained_config", [1]))],
        ("config.json: pretrained_config must be a JSON object, found list",),
    ),
    Case(
        "config-model-key-wrong-type",
        lambda s: ["--engine", s.config_copy(_pretrained("vocab_size", "big"))],
        ("config.json: pretrained_config.vocab_size must be a positive integer, found 'big'",),
    ),
    Case(
        "weights-missing",
        lambda s: ["--engine", s.engine_copy(lambda f: (f / "rank0.safetensors").unlink())],
        ("rank0.safetensors: engine weights missing", "rebuild the engine"),
    ),
    Case(
        "weights-unreadable",
        lambda s: ["--engine", s.engine_copy(lambda f: (f / "rank0.safetensors").write_bytes(b"garbage"))],
        ("rank0.safetensors: cannot read weights", "rebuild the engine"),
    ),
    Case(
        "tokenizer-missing",
        lambda s: ["--engine", s.engine_copy(lambda f: shutil.rmtree(f / "tokenizer"))],
        ("tokenizer: tokenizer missing", "rebuild the engine"),
    ),
    Case(
        "tokenizer-smaller-than-vocab",
        lambda s: ["--engine", s.config_copy(_bigger_vocab)],
        (
            "tokenizer: the tokenizer knows 1280 tokens but the engine's vocab_size is 2280",
            "use the model's own tokenizer",
        ),
    ),
    Case(
        "hf-pickle-weights-refused",
        lambda s: ["--engine", s.hf_pickle_model()],
        ("hf-pickle: no *.safetensors weights", "loads safetensors only", "safe_serialization=True"),
    ),
    Case(
        "tokenizer-ships-code",
        lambda s: ["--engine", s.engine_copy(_tokenizer_ships_code(s.tmp / "unpickled"))],
        (
            "tokenizer: the tokenizer ships its own code",
            "which the emulator never runs",
            "rebuild the engine",
        ),
    ),
    Case(
        "backend-unknown",
        lambda s: ["--backend", "emulater", "--engine", str(s.engine)],
        ("--backend 'emulater': unknown backend; did you mean 'emulator'?",),
    ),
    _plugin(
        "backend-class-not-importable",
        "nosuch_module:Engine",
        "--engine 'nosuch_module:Engine': cannot import 'nosuch_module'",
    ),
    # issue 15, the hostile round: each class its fix refuses in one line
    _plugin(  # 4: backend calls guarded
        "count-tokens-raises",
        "fault_engines:CountRaises",
        "count_tokens raised ValueError: tokenizer.json: unknown normalizer",
        dataset=True,
    ),
    _plugin(
        "count-tokens-wrong-shape",
        "fault_engines:CountsWrong",
        "count_tokens returned int for 16 prompts",
        dataset=True,
    ),
    _plugin(
        "engine-module-raises-on-import",
        "raises_on_import:Engine",
        "importing 'raises_on_import' raised RuntimeError: CUDA driver",
    ),
    Case(
        "config-nested-too-deep",
        lambda s: ["--engine", s.engine_copy(_nested_config)],  # 6
        ("config.json", "nested deeper than 64 levels"),
    ),
    Case(
        "config-limit-beyond-any-engine",
        lambda s: [
            "--engine",
            s.config_copy(lambda c: c["build_config"].__setitem__("max_batch_size", 10**30)),
        ],
        ("config.json: build_config.max_batch_size", "above 65536"),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Case, bad_input_setup: Setup, suites: Suites) -> None:
    refused(case, bad_input_setup, suites)


def test_batch_size_above_the_engine_maximum(
    tmp_path: Path,
    engine_factory: EngineFactory,
    small_dataset: Path,
    suites: Suites,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A failing test (not a usage error): the limits suite and lint name the trtllm-build flag.
    `run` itself goes on and generates, as the emulator accepts the batch (see the incident)."""
    engine = str(engine_factory(8, 4))
    proc = suites(
        "-q",
        "--engine",
        engine,
        "--batch-sizes",
        "16",
        "--beam-widths",
        "1",
        "--dataset",
        str(small_dataset),
        "--report-dir",
        str(tmp_path / "reports"),
        suite=SUITES / "test_preflight.py",
    )
    code, out = proc.returncode, proc.stdout
    assert code == 1, out
    assert "FAILED" in out and "test_engine_limits[bs16-beam1]" in out
    assert (
        "batch size 16 exceeds the engine's max_batch_size 8; rebuild with trtllm-build --max_batch_size 16"
        in out
    )
    assert "Traceback" not in out
    capsys.readouterr()  # the run's output, echoed by pytester
    code = main(["lint", engine, "--batch-size", "16"])
    out = capsys.readouterr().out
    assert code == 1 and "FAIL    max_batch_size   batch size 16 exceeds" in out and "Traceback" not in out
