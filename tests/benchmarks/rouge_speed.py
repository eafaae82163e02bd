"""Benchmark: harness.verdict.scoring.rouge_l against rouge-score, pairs/s at 100 and 512 words.

    python tests/benchmarks/rouge_speed.py [--pairs 200]

Every pair is a fresh random text, so no cache helps either side; both tokenize with
rouge_score's tokenizer. Prints one line per length and the speed-up.
"""

from __future__ import annotations

import argparse
import random
import time

from rouge_score import rouge_scorer

from harness.verdict.scoring import rouge_l

VOCAB = [f"w{i}" for i in range(2000)]


def texts(rng: random.Random, n: int, words: int) -> list[str]:
    return [" ".join(rng.choices(VOCAB[:300], k=words)) for _ in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=200)
    args = parser.parse_args()
    scorer = rouge_scorer.RougeScorer(["rougeL"])
    for words in (100, 512):
        rng = random.Random(words)
        n_ref = max(10, args.pairs // (5 if words > 200 else 1))
        t, p = texts(rng, n_ref, words), texts(rng, n_ref, words)
        start = time.perf_counter()
        slow = [scorer.score(a, b)["rougeL"].fmeasure for a, b in zip(t, p)]
        ref_rate = n_ref / (time.perf_counter() - start)
        t2, p2 = texts(rng, args.pairs * 10, words), texts(rng, args.pairs * 10, words)
        start = time.perf_counter()
        rouge_l(t2, p2)
        fast_rate = len(t2) / (time.perf_counter() - start)
        assert rouge_l(t, p) == slow
        print(
            f"{words:4d} words: rouge-score {ref_rate:9.1f} pairs/s, harness {fast_rate:9.1f} pairs/s, "
            f"{fast_rate / ref_rate:6.1f}x"
        )


if __name__ == "__main__":
    main()
