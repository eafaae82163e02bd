"""Seeded generator of news-like documents with reference summaries.

The bundled dataset and the bundled model's training data both come from here, so the
small model can learn the task. Each document leads with the key facts (who, what, where,
how many) and pads them with body sentences and distractors; the summary restates the key
facts in one sentence, as a news highlight would.

A summary is one phrasing drawn at random among several equally valid ones (clause order,
synonyms, equivalent constructions, digits or number words), from a random stream of its
own, so the phrasing says nothing about the document. A model trained on this data has
genuine near-ties between its candidates at those choice points, and its summaries score
against the references the way real summarizers do (ROUGE-L well below 1) while a damaged
output scores far lower. That is what lets benign batch-shape drift (which picks the
runner-up of a near-tie) change outputs without changing their quality.

The topics are ``harness.bundled.topics`` (their sentences and phrasings ``topics.json``),
the words they draw from ``harness.bundled.vocabulary`` (``vocabulary.json``).
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from harness.bundled.topics import TOPICS
from harness.bundled.vocabulary import FILLER


@dataclass(frozen=True)
class Example:
    """One document with its reference summary."""

    id: str
    text: str
    summary: str
    topic: str


_GROUP = re.compile(r"\[([^\[\]]+)\]")


def phrase(phrasings: Sequence[str], facts: Mapping[str, str], rng: random.Random) -> str:
    """One summary: a phrasing, its facts filled in, each ``[a|b]`` group resolved by ``rng``."""
    text = rng.choice(list(phrasings)).format(**facts)
    text = _GROUP.sub(lambda m: rng.choice(m.group(1).split("|")), text)
    return text[0].upper() + text[1:]


def _words(text: str) -> int:
    return len(text.split())


def make_example(
    rng: random.Random, index: int, *, prefix: str = "doc", phrasing: random.Random | None = None
) -> Example:
    """Draw one example: a 60-200 word document and a 15-35 word summary.

    ``rng`` draws the document and its facts; ``phrasing`` (default: ``rng``) picks the
    summary's wording, so a separate stream keeps the wording independent of the document.
    """
    topic = rng.choice(sorted(TOPICS))
    story = TOPICS[topic](rng)
    rest = story.body[:]
    rng.shuffle(rest)
    extra = rng.sample(FILLER, k=len(FILLER))
    target = rng.randint(60, 150)
    sentences = story.lead[:]
    pool = rest + extra
    while _words(" ".join(sentences)) < target and pool:
        sentences.append(pool.pop(0))
    text = " ".join(sentences)
    if _words(text) > 200:  # never happens with these templates; keep the contract explicit
        text = " ".join(text.split()[:200])
    summary = phrase(story.phrasings, story.facts, phrasing or rng)
    return Example(id=f"{prefix}-{index:05d}", text=text, summary=summary, topic=topic)


def generate(n: int, seed: int, *, prefix: str = "doc") -> list[Example]:
    """``n`` examples drawn from one seeded random stream for the documents and another for
    the summaries' wording (same seed, same examples)."""
    rng, wording = random.Random(seed), random.Random(f"phrasing/{seed}")
    return [make_example(rng, i, prefix=prefix, phrasing=wording) for i in range(n)]
