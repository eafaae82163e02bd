"""Check that a converted GGUF tokenizes as transformers does, through a real server.

    python -m tests.servers.verify_tokenizer [--kind llama-server] [--model-dir DIR]
                                             [--variant bundled|byte-fallback|byte-level]

Every bundled prompt ("{text} TL;DR: " over ``harness/bundled/news.jsonl``) goes through the
server's tokenizer (``/tokenize`` of llama-server, ``/extras/tokenize`` of llama-cpp-python)
and through the model folder's ``tokenizer.json`` (transformers); the ids must be equal.
Where the vocabulary has byte tokens, strings outside the training alphabet are checked too.

``--variant byte-fallback`` / ``byte-level`` train a stand-in tokenizer of the given kind on
the bundled generator's training texts and pair it with the bundled weights (same vocab
size): a test of the conversion for a retrained model, not a usable model.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

from tests.servers import llama_cpp
from tests.servers.gguf_vocab import plan_vocab

TEMPLATE = "{text} TL;DR: "
NEWS = llama_cpp.REPO / "harness" / "bundled" / "news.jsonl"
OUTSIDE_ALPHABET = [
    'Prices rose 5% (again) - "quoted" TL;DR: ',
    "café naïve Zürich — 東京 🙂 TL;DR: ",
    "tabs\tand\nnewlines  double  spaces TL;DR: ",
]


def bundled_prompts() -> list[tuple[str, str]]:
    rows = [json.loads(line) for line in NEWS.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [(r["id"], TEMPLATE.format(text=r["text"])) for r in rows]


def _post(url: str, body: dict[str, Any]) -> Any:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def server_tokenize(server: llama_cpp.Server, text: str) -> list[int]:
    if server.kind == "llama-server":  # add_special: as a completion prompt is tokenized
        return list(_post(f"{server.root_url}/tokenize", {"content": text, "add_special": True})["tokens"])
    return list(_post(f"{server.root_url}/extras/tokenize", {"input": text})["tokens"])


def make_variant(kind: str, out: Path, base: Path = llama_cpp.BUNDLED_MODEL) -> Path:
    """A model folder: the bundled weights with a stand-in tokenizer of ``kind``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from harness.bundled.synthetic import generate

    config = json.loads((base / "config.json").read_text())
    size = int(config["vocab_size"])
    corpus = [TEMPLATE.format(text=e.text) + e.summary for e in generate(2000, 7, prefix="train")]
    specials = ["<unk>", "<s>", "</s>", "<pad>"]
    if kind == "byte-fallback":
        byte_tokens = [f"<0x{i:02X}>" for i in range(256)]
        tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always"),
                pre_tokenizers.Punctuation(),
                pre_tokenizers.Digits(individual_digits=True),
            ]
        )
        tok.decoder = decoders.Sequence(
            [decoders.ByteFallback(), decoders.Metaspace(replacement="▁", prepend_scheme="always")]
        )
        trainer = trainers.BpeTrainer(vocab_size=size, special_tokens=specials + byte_tokens)
    elif kind == "byte-level":
        byte_tokens = []
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=size, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        )
    else:
        raise ValueError(kind)
    tok.train_from_iterator(corpus, trainer)
    data = json.loads(tok.to_str())
    # byte tokens belong to the model's vocabulary, not to the added (matched-as-text) tokens
    data["added_tokens"] = [t for t in data["added_tokens"] if t["content"] not in set(byte_tokens)]
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    for name in ("config.json", "generation_config.json", "model.safetensors", "tokenizer_config.json"):
        shutil.copy(base / name, out / name)
    return out


def verify(kind: llama_cpp.Kind, model_dir: Path, cache: Path | None = None) -> int:
    from transformers import AutoTokenizer

    plan = plan_vocab(model_dir)
    print(f"{model_dir}: {plan.summary()}")
    hf = AutoTokenizer.from_pretrained(str(model_dir))
    gguf = llama_cpp.convert(model_dir, cache)
    texts = bundled_prompts()
    if plan.byte_fallback or plan.model == "gpt2":
        texts += [(f"outside-{i}", t) for i, t in enumerate(OUTSIDE_ALPHABET)]
    bad = 0
    with llama_cpp.start(kind, gguf, 1, cache=cache) as server:
        for pid, text in texts:
            want = hf(text)["input_ids"]
            try:
                got = server_tokenize(server, text)
            except OSError as exc:
                print(f"  {pid}: server error {exc}; alive={server.alive()}")
                bad += 1
                continue
            if got != want:
                bad += 1
                at = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
                print(
                    f"  {pid}: MISMATCH at {at}: server {got[at : at + 6]} transformers {want[at : at + 6]} "
                    f"({hf.convert_ids_to_tokens(want[at : at + 6])})"
                )
    print(f"{kind}: {len(texts) - bad} of {len(texts)} tokenizations equal transformers'")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=llama_cpp.KINDS, default="llama-server")
    parser.add_argument("--model-dir", type=Path, default=llama_cpp.BUNDLED_MODEL)
    parser.add_argument("--variant", choices=["bundled", "byte-fallback", "byte-level"], default="bundled")
    parser.add_argument("--cache", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.variant == "bundled":
        return verify(args.kind, args.model_dir, args.cache)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = make_variant(args.variant, Path(tmp) / f"variant-{args.variant}", args.model_dir)
        return verify(args.kind, model_dir, args.cache)


if __name__ == "__main__":
    sys.exit(main())
