"""The vocabulary step of a GGUF conversion, for the tokenizers a transformers BPE model ships.

llama.cpp's own converter (``convert_hf_to_gguf.py``) handles the model weights of a
``MistralForCausalLM`` folder, but not the bundled tokenizer: it wants ``sentencepiece``
and a ``tokenizer.model``, its Llama BPE path needs ``byte_fallback`` and a ``Sequence``
decoder, and its gpt2 path does not recognise a custom pre-tokenizer. :func:`plan_vocab`
reads ``tokenizer.json`` alone and says what llama.cpp should be told:

* a Metaspace BPE (``▁`` for spaces; the bundled one, with or without ``byte_fallback`` and
  ``<0xNN>`` tokens) becomes an SPM ("llama") vocabulary whose scores follow the merge ranks
  (score = -rank: llama.cpp's SPM tokenizer merges the adjacent pair with the highest score,
  which replays the BPE merges in order). ``<0xNN>`` tokens of a ``byte_fallback`` model are
  BYTE tokens, which is what llama.cpp falls back to for a character outside the vocabulary;
  without them such a character makes llama.cpp throw (``byte_to_token``).
* a ByteLevel BPE with the GPT-2 split (``ByteLevel(use_regex=True)`` alone) becomes a "gpt2"
  vocabulary with its merges and the ``gpt-2`` pre-tokenizer.

Anything else is refused with the reason. ``add_bos``/``add_eos`` follow the
post-processor's single-sequence template (gguf-py's reader misses a template that holds the
sequence alone, and llama.cpp would then add a BOS that transformers does not).

This module imports nothing from llama.cpp; ``convert_gguf.py`` applies the plan to gguf-py's
writer.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

# gguf.TokenType values (llama.cpp's llama_token_type)
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

BYTE_TOKEN = re.compile(r"^<0x[0-9A-F]{2}>$")
SPECIAL_NAMES = ("bos", "eos", "unk", "pad")
NO_MERGE = -1e9


class UnsupportedTokenizer(ValueError):
    """tokenizer.json describes something this conversion cannot reproduce in llama.cpp."""


@dataclass
class VocabPlan:
    model: Literal["llama", "gpt2"]  # llama.cpp tokenizer.ggml.model
    pre: str  # tokenizer.ggml.pre
    tokens: list[str]
    scores: list[float]
    types: list[int]
    merges: list[str] = field(default_factory=list)  # gpt2 only: "a b", in rank order
    add_space_prefix: bool = False
    add_bos: bool = False
    add_eos: bool = False
    special_ids: dict[str, int] = field(default_factory=dict)
    byte_fallback: bool = False

    def summary(self) -> str:
        n_bytes = sum(t == BYTE for t in self.types)
        return (
            f"{self.model} vocabulary, {len(self.tokens)} tokens ({n_bytes} byte tokens), "
            f"pre {self.pre!r}, add_space_prefix {self.add_space_prefix}, add_bos "
            f"{self.add_bos}, add_eos {self.add_eos}, special {self.special_ids}"
        )


def _merge_pair(merge: Any) -> tuple[str, str]:
    # tokenizers writes merges as "a b" (older) or ["a", "b"] (newer)
    if isinstance(merge, str):
        a, _, b = merge.partition(" ")
        return a, b
    a, b = merge
    return a, b


def _flatten(node: dict[str, Any] | None, key: str) -> list[dict[str, Any]]:
    """A pre-tokenizer/decoder node and the members of Sequence nodes, in order."""
    if not node:
        return []
    if node.get("type") == "Sequence":
        out: list[dict[str, Any]] = []
        for child in node.get(key, []):
            out.extend(_flatten(child, key))
        return out
    return [node]


def _template_specials(post: dict[str, Any] | None) -> tuple[list[str], list[str]]:
    """(leading, trailing) special tokens the single-sequence template adds."""
    for proc in _flatten(post, "processors"):
        if proc.get("type") == "TemplateProcessing":
            items = proc.get("single", [])
            names = ["A" if "Sequence" in it else it["SpecialToken"]["id"] for it in items]
            if "A" not in names:
                raise UnsupportedTokenizer("post-processor template without the sequence")
            i = names.index("A")
            return names[:i], names[i + 1 :]
        if proc.get("type") in ("BertProcessing", "RobertaProcessing"):
            return [proc["cls"][0]], [proc["sep"][0]]
    return [], []


def plan_vocab(model_dir: Path, n_vocab: int | None = None) -> VocabPlan:
    tj = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
    tc_path = model_dir / "tokenizer_config.json"
    tc = json.loads(tc_path.read_text(encoding="utf-8")) if tc_path.is_file() else {}
    model = tj["model"]
    if model.get("type") != "BPE":
        raise UnsupportedTokenizer(f"model type {model.get('type')!r}: only BPE is converted")
    if tj.get("normalizer"):
        raise UnsupportedTokenizer(f"normalizer {tj['normalizer'].get('type')!r} is not reproduced")

    vocab: dict[str, int] = dict(model["vocab"])
    added = {t["content"]: t for t in tj.get("added_tokens", [])}
    for content, t in added.items():
        vocab[content] = t["id"]
    size = max(vocab.values()) + 1
    if n_vocab is not None:
        if n_vocab < size:
            raise UnsupportedTokenizer(f"tokenizer has {size} ids, the model's vocab_size is {n_vocab}")
        size = n_vocab
    tokens = [f"[PAD{i}]" for i in range(size)]
    types = [UNUSED] * size
    for text, i in vocab.items():
        tokens[i] = text
        types[i] = NORMAL

    merges = [_merge_pair(m) for m in model.get("merges", [])]
    pres = _flatten(tj.get("pre_tokenizer"), "pretokenizers")
    pre_types = [p["type"] for p in pres]
    byte_fallback = bool(model.get("byte_fallback"))
    unk = model.get("unk_token")

    if "ByteLevel" in pre_types:
        if pre_types != ["ByteLevel"]:
            raise UnsupportedTokenizer(
                f"ByteLevel with other pre-tokenizers {pre_types}: llama.cpp has no matching split"
            )
        bl = pres[0]
        if not bl.get("use_regex", True) or bl.get("add_prefix_space", False):
            raise UnsupportedTokenizer("ByteLevel without the GPT-2 regex or with add_prefix_space")
        plan = VocabPlan(
            model="gpt2",
            pre="gpt-2",
            tokens=tokens,
            scores=[0.0] * size,
            types=types,
            merges=[f"{a} {b}" for a, b in merges],
        )
    elif "Metaspace" in pre_types:
        if pre_types[0] != "Metaspace" or not set(pre_types[1:]) <= {"Punctuation", "Digits"}:
            raise UnsupportedTokenizer(
                f"pre-tokenizers {pre_types}: expected Metaspace first, then "
                "only Punctuation/Digits (splits a BPE vocabulary never merges across)"
            )
        ms = pres[0]
        if ms.get("replacement", "▁") != "▁":
            raise UnsupportedTokenizer(f"Metaspace replacement {ms.get('replacement')!r}")
        # a token no merge makes (an alphabet character, a special or byte token) ranks
        # below every merge, so the SPM tokenizer never prefers it to a real merge
        scores = [NO_MERGE] * size
        for rank, (a, b) in enumerate(merges):
            merged = vocab.get(a + b)
            if merged is not None and scores[merged] == NO_MERGE:
                scores[merged] = -float(rank + 1)
        plan = VocabPlan(
            model="llama",
            pre="default",
            tokens=tokens,
            scores=scores,
            types=types,
            add_space_prefix=ms.get("prepend_scheme", "always") != "never",
            byte_fallback=byte_fallback,
        )
        if byte_fallback:
            for text, i in vocab.items():
                if BYTE_TOKEN.match(text):
                    types[i] = BYTE
            missing = 256 - sum(t == BYTE for t in types)
            if missing:
                raise UnsupportedTokenizer(
                    f"byte_fallback is on but {missing} of the 256 <0xNN> tokens are missing"
                )
        elif any(BYTE_TOKEN.match(text) for text in vocab):
            # llama.cpp's SPM byte_to_token looks <0xNN> up by its text, whatever its type:
            # it would emit them where transformers (no byte_fallback) gives <unk>
            raise UnsupportedTokenizer(
                "<0xNN> tokens without byte_fallback: llama.cpp would fall back "
                "to them where transformers gives <unk>"
            )
    else:
        raise UnsupportedTokenizer(f"pre-tokenizers {pre_types}: neither Metaspace nor ByteLevel")

    for t in added.values():
        types[t["id"]] = CONTROL if t.get("special") else USER_DEFINED
    if unk is not None and unk in vocab:
        types[vocab[unk]] = UNKNOWN

    for name in SPECIAL_NAMES:
        value = tc.get(f"{name}_token")
        if isinstance(value, dict):
            value = value.get("content")
        if isinstance(value, str) and value in vocab:
            plan.special_ids[name] = vocab[value]
    if "unk" not in plan.special_ids and unk in vocab:
        plan.special_ids["unk"] = vocab[unk]
    lead, trail = _template_specials(tj.get("post_processor"))
    if lead and "bos" in plan.special_ids and vocab.get(lead[0]) != plan.special_ids["bos"]:
        raise UnsupportedTokenizer(f"template starts with {lead[0]!r}, not the BOS token")
    plan.add_bos, plan.add_eos = bool(lead), bool(trail)
    return plan


def write_plan(plan: VocabPlan, writer: Any) -> None:
    """Apply the plan to a ``gguf.GGUFWriter``."""
    writer.add_tokenizer_model(plan.model)
    writer.add_tokenizer_pre(plan.pre)
    writer.add_token_list(plan.tokens)
    writer.add_token_scores(plan.scores)
    writer.add_token_types(plan.types)
    if plan.merges:
        writer.add_token_merges(plan.merges)
    writer.add_add_space_prefix(plan.add_space_prefix)
    writer.add_add_bos_token(plan.add_bos)
    writer.add_add_eos_token(plan.add_eos)
    for name, token_id in plan.special_ids.items():
        getattr(writer, f"add_{name}_token_id")(token_id)
