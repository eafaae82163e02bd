"""The GGUF vocabulary plan for the bundled tokenizer and for the kinds a retrained one may be
(tests/servers/gguf_vocab.py; the real conversion and a server are in
tests/integration/test_llama_cpp_servers.py)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.servers.gguf_vocab import (
    BYTE,
    CONTROL,
    NO_MERGE,
    NORMAL,
    UNKNOWN,
    UnsupportedTokenizer,
    plan_vocab,
)
from tests.servers.llama_cpp import BUNDLED_MODEL

N_VOCAB = json.loads((BUNDLED_MODEL / "config.json").read_text(encoding="utf-8"))["vocab_size"]


def _bundled_tokenizer() -> dict[str, Any]:
    tokenizer: dict[str, Any] = json.loads((BUNDLED_MODEL / "tokenizer.json").read_text(encoding="utf-8"))
    return tokenizer


def test_bundled_model_has_1280_ids_which_the_tokenizer_fills() -> None:
    plan = plan_vocab(BUNDLED_MODEL, N_VOCAB)
    assert N_VOCAB == 1280 and len(plan.tokens) == 1280
    assert not any(t.startswith("[PAD") for t in plan.tokens)  # no unused ids


def test_bundled_metaspace_bpe_is_an_spm_vocabulary_without_bos() -> None:
    plan = plan_vocab(BUNDLED_MODEL, N_VOCAB)
    assert (plan.model, plan.pre, plan.add_space_prefix) == ("llama", "default", True)
    # the post-processor's template holds the sequence alone: no BOS, as in transformers
    assert (plan.add_bos, plan.add_eos) == (False, False)
    assert plan.special_ids == {"unk": 0, "bos": 1, "eos": 2, "pad": 3}
    assert plan.types[:4] == [UNKNOWN, CONTROL, CONTROL, CONTROL]


def test_bundled_byte_fallback_tokens_are_byte_typed_after_the_specials() -> None:
    plan = plan_vocab(BUNDLED_MODEL, N_VOCAB)
    assert plan.byte_fallback
    assert plan.types[4:260] == [BYTE] * 256
    assert plan.tokens[4:260] == [f"<0x{b:02X}>" for b in range(256)]
    assert plan.tokens[4 + 0x0A] == "<0x0A>"  # a newline: no character token, its byte
    assert plan.types.count(BYTE) == 256
    assert plan.types.count(NORMAL) == N_VOCAB - 4 - 256  # the BPE tokens


def test_bundled_scores_follow_merge_ranks() -> None:
    tj = _bundled_tokenizer()
    plan = plan_vocab(BUNDLED_MODEL, N_VOCAB)
    vocab = tj["model"]["vocab"]
    first = tj["model"]["merges"][0]
    a, b = first.split(" ") if isinstance(first, str) else first
    assert plan.scores[vocab[a + b]] == -1.0  # the first merge ranks highest
    ranked = [s for s in plan.scores if s != NO_MERGE]
    assert len(ranked) == len(set(ranked)) == len(tj["model"]["merges"])
    # byte and special tokens are made by no merge
    assert set(plan.scores[:260]) == {NO_MERGE}


@pytest.fixture(scope="module")
def variants(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from tests.servers.verify_tokenizer import make_variant

    root = tmp_path_factory.mktemp("variants")
    return {k: make_variant(k, root / k) for k in ("byte-fallback", "byte-level")}


def test_byte_fallback_bpe_keeps_its_256_byte_tokens(variants: dict[str, Path]) -> None:
    plan = plan_vocab(variants["byte-fallback"], N_VOCAB)
    assert plan.model == "llama" and plan.byte_fallback
    assert sum(t == BYTE for t in plan.types) == 256
    assert plan.tokens[plan.types.index(BYTE)] == "<0x00>"
    tj = json.loads((variants["byte-fallback"] / "tokenizer.json").read_text(encoding="utf-8"))
    assert not any(t["content"].startswith("<0x") for t in tj["added_tokens"])


def test_byte_level_bpe_is_a_gpt2_vocabulary_with_merges(variants: dict[str, Path]) -> None:
    plan = plan_vocab(variants["byte-level"], N_VOCAB)
    assert (plan.model, plan.pre, plan.add_space_prefix) == ("gpt2", "gpt-2", False)
    assert plan.merges and all(len(m.split(" ")) == 2 for m in plan.merges)
    assert plan.types.count(NORMAL) == N_VOCAB - 4


def _edited(tmp_path: Path, edit: Callable[[dict[str, Any]], object]) -> Path:
    d = tmp_path / "model"
    shutil.copytree(BUNDLED_MODEL, d, ignore=shutil.ignore_patterns("*.safetensors"))
    tj = json.loads((d / "tokenizer.json").read_text(encoding="utf-8"))
    edit(tj)
    (d / "tokenizer.json").write_text(json.dumps(tj), encoding="utf-8")
    return d


@pytest.mark.parametrize(
    "edit, words",
    [
        (lambda tj: tj["model"].update(type="WordPiece"), "only BPE"),
        (lambda tj: tj.update(normalizer={"type": "Lowercase"}), "normalizer"),
        (lambda tj: tj["model"]["vocab"].pop("<0x0A>"), "1 of the 256 <0xNN> tokens are missing"),
        (lambda tj: tj["model"].update(byte_fallback=False), "<0xNN> tokens without byte_fallback"),
        (
            lambda tj: tj["pre_tokenizer"]["pretokenizers"].insert(1, {"type": "Whitespace"}),
            "Metaspace first",
        ),
        (
            lambda tj: tj.update(
                pre_tokenizer={
                    "type": "Sequence",
                    "pretokenizers": [
                        {
                            "type": "ByteLevel",
                            "add_prefix_space": False,
                            "trim_offsets": True,
                            "use_regex": True,
                        },
                        {"type": "Digits", "individual_digits": True},
                    ],
                }
            ),
            "no matching split",
        ),
    ],
)
def test_what_llama_cpp_cannot_reproduce_is_refused_with_the_reason(
    tmp_path: Path, edit: Callable[[dict[str, Any]], object], words: str
) -> None:
    with pytest.raises(UnsupportedTokenizer, match=words):
        plan_vocab(_edited(tmp_path, edit), N_VOCAB)


def test_a_vocab_larger_than_the_model_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedTokenizer, match="vocab_size is 512"):
        plan_vocab(BUNDLED_MODEL, 512)
