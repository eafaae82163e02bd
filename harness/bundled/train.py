"""Build the bundled dataset, tokenizer and model (seeded; not run in CI).

    python -m harness.bundled.train [--steps 1200] [--output harness/bundled]

Writes ``news.jsonl`` (the evaluation set) and ``model/`` (a transformers
``MistralForCausalLM`` with grouped-query attention, its tokenizer and safetensors
weights). Training data comes from the same generator with another seed, never from the
evaluation set. 1200 steps took 21 minutes on a 2-core CPU (final loss 0.02).
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.bundled.synthetic import Example, generate

if TYPE_CHECKING:
    import torch
    from tokenizers.models import BPE
    from transformers import MistralForCausalLM, PreTrainedTokenizerFast

EVAL_SEED = 20261130
TRAIN_SEED = 7
EVAL_COUNT = 64
PROMPT_TEMPLATE = "{text} TL;DR: "
SPECIAL_TOKENS = ("<unk>", "<s>", "</s>", "<pad>")
VOCAB_SIZE = 1280  # 256 byte tokens, 4 specials, the rest BPE (whole words here)
HERE = Path(__file__).resolve().parent


def write_dataset(path: Path, examples: list[Example]) -> None:
    """One JSON object per line: id, text, summary, topic."""
    with path.open("w", encoding="utf-8") as f:
        for ex in examples:
            f.write(
                json.dumps(
                    {"id": ex.id, "text": ex.text, "summary": ex.summary, "topic": ex.topic},
                    ensure_ascii=False,
                )
                + "\n"
            )


def _byte_fallback_bpe(trained: dict[str, object]) -> BPE:
    """The trained BPE with the 256 byte tokens ``<0x00>``..``<0xFF>`` after the specials and
    byte fallback on: every byte has a token, so any text encodes without ``<unk>`` (as in
    Llama's tokenizer; llama.cpp's GGUF conversion needs it, see llama-cpp-notes.md)."""
    from tokenizers import models

    vocab = {t: i for i, t in enumerate(SPECIAL_TOKENS)}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    learned, pairs = trained["vocab"], trained["merges"]
    assert isinstance(learned, dict) and isinstance(pairs, list)  # the tokenizers library's JSON
    for token, _ in sorted(learned.items(), key=lambda kv: int(kv[1])):
        vocab.setdefault(str(token), len(vocab))
    merges: list[tuple[str, str]] = []
    for m in pairs:  # "a b" in older tokenizers' JSON, ["a", "b"] in newer
        first, second = m.split(" ") if isinstance(m, str) else m
        merges.append((str(first), str(second)))
    return models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True)


def train_tokenizer(corpus: list[str], out_dir: Path) -> PreTrainedTokenizerFast:
    """A small BPE tokenizer with byte fallback: whole words for this vocabulary, digits one
    by one, any other character as its UTF-8 bytes."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always"),
            pre_tokenizers.Punctuation(),
            pre_tokenizers.Digits(individual_digits=True),
        ]
    )
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE - 256, min_frequency=1, special_tokens=list(SPECIAL_TOKENS)
    )
    tok.train_from_iterator(corpus, trainer)
    tok.model = _byte_fallback_bpe(json.loads(tok.to_str())["model"])
    # Llama's decoder: spaces back, byte tokens joined into characters, the leading space off
    tok.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        model_max_length=1024,
        padding_side="left",
    )
    fast.save_pretrained(out_dir)
    return fast


def encode_pairs(tok: PreTrainedTokenizerFast, examples: list[Example]) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, summary ids + eos) for each example."""
    prompts = tok([PROMPT_TEMPLATE.format(text=e.text) for e in examples], add_special_tokens=False)[
        "input_ids"
    ]
    targets = tok([e.summary for e in examples], add_special_tokens=False)["input_ids"]
    return [(p, t + [tok.eos_token_id]) for p, t in zip(prompts, targets)]


def _batch(
    batch: list[tuple[list[int], list[int]]], pad: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # ids, mask, labels
    """Right-padded prompt + summary rows; the loss is on the summary only (the model learns
    to summarize, not to write news)."""
    import torch

    width = max(len(p) + len(t) for p, t in batch)
    ids = torch.full((len(batch), width), pad, dtype=torch.long)
    labels = torch.full((len(batch), width), -100, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for i, (p, t) in enumerate(batch):
        s = p + t
        ids[i, : len(s)] = torch.tensor(s)
        mask[i, : len(s)] = 1
        labels[i, len(p) : len(s)] = torch.tensor(t)
    return ids, mask, labels


def new_model(tok: PreTrainedTokenizerFast) -> MistralForCausalLM:
    """The bundled architecture: 4 layers, 6 query heads sharing 2 KV heads (GQA)."""
    from transformers import MistralConfig, MistralForCausalLM

    # a mapping: transformers 4 takes rope_theta as a parameter, 5 folds it into rope_parameters
    settings: dict[str, Any] = dict(
        vocab_size=len(tok),
        hidden_size=192,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=6,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=512,
        rope_theta=10000.0,
        sliding_window=None,
        tie_word_embeddings=False,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    return MistralForCausalLM(MistralConfig(**settings))


def train_model(
    model: MistralForCausalLM, pairs: list[tuple[list[int], list[int]]], *, steps: int, batch: int, pad: int
) -> float:
    """AdamW with a one-cycle schedule over seeded random batches; returns the last loss."""
    import torch

    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01, betas=(0.9, 0.98))
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=steps, pct_start=0.1)
    rng = random.Random(1)
    start = time.time()
    model.train()
    loss = torch.tensor(float("nan"))
    for step in range(steps):
        ids, mask, labels = _batch(rng.sample(pairs, batch), pad)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        if step % 25 == 0 or step == steps - 1:
            print(f"step {step:5d} loss {loss.item():.4f} {time.time() - start:7.1f}s", flush=True)
    model.eval()
    return float(loss.item())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=HERE)
    parser.add_argument("--steps", type=int, default=1200)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--train-count", type=int, default=30000)
    parser.add_argument(
        "--threads", type=int, default=2, help="torch threads (1 on a machine shared with other jobs)"
    )
    args = parser.parse_args(argv)

    import torch

    torch.manual_seed(0)
    random.seed(0)
    torch.set_num_threads(args.threads)
    out: Path = args.output
    model_dir = out / "model"
    model_dir.mkdir(parents=True, exist_ok=True)

    evals = generate(EVAL_COUNT, EVAL_SEED, prefix="news")
    write_dataset(out / "news.jsonl", evals)
    eval_texts = {e.text for e in evals}
    train = [e for e in generate(args.train_count, TRAIN_SEED, prefix="train") if e.text not in eval_texts]

    corpus = [PROMPT_TEMPLATE.format(text=e.text) + e.summary for e in train]
    tok = train_tokenizer(corpus, model_dir)
    pairs = encode_pairs(tok, train)
    model = new_model(tok)
    params = sum(p.numel() for p in model.parameters())
    print(f"{len(train)} training examples, vocab {len(tok)}, {params / 1e6:.2f}M parameters")
    start = time.time()
    loss = train_model(model, pairs, steps=args.steps, batch=args.batch, pad=tok.pad_token_id)
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(model_dir, safe_serialization=True)
    print(f"saved {model_dir} in {time.time() - start:.0f}s (final loss {loss:.4f})")


if __name__ == "__main__":
    main()
