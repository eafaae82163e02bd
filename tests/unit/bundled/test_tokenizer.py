"""The bundled tokenizer has byte fallback: every character encodes (as its UTF-8 bytes where
the vocabulary has no token for it) and decodes back, with no ``<unk>``; llama.cpp's GGUF
conversion needs that (tests/servers/README.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from harness.engines.emulator.build import BUNDLED_MODEL

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

OUTSIDE = ['-(")%é', 'Café -(") 50% naïve 東京 — ok.', "tab\there, emoji 🙂, ß", "<0x41> literal"]


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerBase:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(BUNDLED_MODEL))


def test_the_vocabulary_holds_every_byte() -> None:
    spec = json.loads((BUNDLED_MODEL / "tokenizer.json").read_text(encoding="utf-8"))
    assert spec["model"]["type"] == "BPE" and spec["model"]["byte_fallback"] is True
    assert all(f"<0x{b:02X}>" in spec["model"]["vocab"] for b in range(256))
    assert spec["decoder"]["type"] == "Sequence"


@pytest.mark.parametrize("text", OUTSIDE)
def test_characters_outside_the_alphabet_round_trip(tokenizer: PreTrainedTokenizerBase, text: str) -> None:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.unk_token_id not in ids
    # the emulator decodes with skip_special_tokens: byte tokens are ordinary tokens
    assert tokenizer.decode(ids, skip_special_tokens=True) == text


def test_ordinary_text_keeps_whole_words(tokenizer: PreTrainedTokenizerBase) -> None:
    ids = tokenizer("Prague reported 451 new cases.", add_special_tokens=False)["input_ids"]
    assert len(ids) == 9  # Prague reported 4 5 1 new cases .
    assert tokenizer.decode(ids) == "Prague reported 451 new cases."


def test_train_tokenizer_gives_byte_fallback(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    from harness.bundled.train import train_tokenizer

    train_tokenizer(["The council met on Monday. TL;DR: The council met."] * 4, tmp_path)
    tok = AutoTokenizer.from_pretrained(str(tmp_path))
    for text in OUTSIDE:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert tok.unk_token_id not in ids and tok.decode(ids) == text
