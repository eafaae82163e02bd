"""A plug-in's in-flight answer read as a Generation (harness.engines.base.as_generation): what
the engine says is kept, what is not a count or a time is not said."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from harness.engines.base import as_generation


def test_what_the_answer_says_is_kept() -> None:
    got = as_generation(SimpleNamespace(text="a summary", slot=3, cached_tokens=120, first_token=0.25))
    assert (got.text, got.slot, got.cached_tokens, got.first_token) == ("a summary", 3, 120, 0.25)


@pytest.mark.parametrize("bad", [-1, True, math.nan, math.inf, "0.2", None])
def test_what_is_not_a_count_or_a_time_is_not_said(bad: object) -> None:
    got = as_generation(SimpleNamespace(text="x", slot=bad, cached_tokens=bad, first_token=bad))
    assert (got.slot, got.cached_tokens, got.first_token) == (None, None, None)
