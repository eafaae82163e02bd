"""The seeded generator: summaries worded one of several equally valid ways, independently
of the document, so a model trained on it has genuine near-ties (harness/bundled/synthetic.py)."""

from __future__ import annotations

import random
import re

import pytest

from harness.bundled.synthetic import generate, make_example, phrase
from harness.bundled.topics import TOPICS
from harness.verdict.scoring import rouge_l

GROUP = re.compile(r"\[([^\[\]]+)\]")


def _tokens(text: str) -> int:
    return len(re.sub(r"[^a-z0-9]+", " ", text.lower()).split())  # rouge_score's tokens


@pytest.mark.parametrize("topic", sorted(TOPICS))
def test_alternatives_of_a_group_weigh_the_same(topic: str) -> None:
    """Within a ``[a|b]`` group the alternatives have as many ROUGE tokens and share no word,
    so taking one for another is quality-neutral in expectation."""
    for seed in range(20):
        story = TOPICS[topic](random.Random(seed))
        for template in story.phrasings:
            for group in GROUP.findall(template.format(**story.facts)):
                options = group.split("|")
                assert len({_tokens(o) for o in options}) == 1, options
                words = [set(re.sub(r"[^a-z0-9]+", " ", o.lower()).split()) for o in options]
                shared = set.intersection(*words) - set(story.facts.get("city", "").lower().split())
                assert shared <= {"the", "to"}, options


def test_the_wording_never_changes_the_document() -> None:
    a = make_example(random.Random(5), 0, phrasing=random.Random(1))
    b = make_example(random.Random(5), 0, phrasing=random.Random(2))
    assert a.text == b.text and a.topic == b.topic


def test_summaries_differ_in_wording_and_score_well_below_one_against_each_other() -> None:
    """Two wordings of the same facts score as a model's summary scores against its
    reference: well below 1, far above an unrelated summary."""
    same, other = [], []
    for i in range(300):
        story = TOPICS[sorted(TOPICS)[i % len(TOPICS)]](random.Random(i))
        x, y = (phrase(story.phrasings, story.facts, random.Random(f"{k}/{i}")) for k in "xy")
        same.append(rouge_l([x], [y])[0])
    examples = generate(300, 11)
    other = rouge_l([e.summary for e in examples], [e.summary for e in examples[1:] + examples[:1]])
    assert 0.6 < sum(same) / len(same) < 0.8
    assert sum(other) / len(other) < 0.3
    assert len({e.summary.split()[0] for e in examples if e.topic == "election"}) > 5
