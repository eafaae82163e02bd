"""Did a server really run a batch's requests together? Judged from each answer's timing.

A batch of size B goes to a server as B requests in flight at once. A server that runs one
request at a time (llama-cpp-python's server: one lock around the model) answers them one
after another; its "batch positions" are places in a queue, and a cell that passes there has
not tested any batch position. The openai backend times every request
(``RequestTiming``: sent, written, first byte, finished; the server's token count); this module
says, per batch and then per cell, whether the answers came as from a server working on the
requests together or one after another.

**One batch** (``judge_batch``). The first answer to finish gives the server's pace: seconds
per unit of work, from when its request was written to when its answer ended, where a
request's work is its generated tokens + 1 (the prompt step). Two predictions of when the last
answer ends follow from it: *together*, every request worked on from its own arrival at that
pace (the last ends at the latest arrival + work); *one after another*, each request started
when the previous one ended (in the order they finished). The batch was served one after
another when the last answer ended nearer to the second prediction than to the first
(geometrically: after the geometric mean of the two). It cannot be judged when the two
predictions are within a factor ``MARGIN`` of each other (one answer much longer than the rest
makes both the same), when the batch was not in flight at once (a request was still being
written after the first answer was half done: the server answers faster than the requests
arrive, and overheads are all there is to see), or when the batch has one request. Both predictions scale with the pace, so the rule does not depend on
how fast the server is, only on the shape of the finishing times.

**Token counts are evidence only when plausible** (``implausible``). A server's count of the
tokens it generated (``usage.completion_tokens``) sets each request's work, so a count it
could not have generated skews both predictions: more than ``max_tokens`` (the harness asks
for ``--max-new-tokens``; a million against 16 made a server that answered one request at a
time look as if nothing could be judged), or far fewer than the words of its text. A batch
with such a count is not judged (``Served.UNTRUSTED``), and a cell with one is not shown to have
exercised its positions.

**One cell** (``cell_notice``): its positions were not exercised when at least
``MIN_JUDGED`` of its batches could be judged and more than half of those were served one
after another. Single batches are noisy (a request whose connection was accepted late runs
alone for a while; short answers are dominated by overheads); the majority over all the cell's
batches is not. On the recorded greedy answers (tests/data/servers/, batches of 4, with and
without ``repeat_penalty``) llama-cpp-python's batches were judged one after another in 32 of
32; llama-server ``--parallel 4``'s in 1 of the 26 that could be judged (6 could not: a
connection accepted late left a request alone for a while).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from harness.engines.base import RequestTiming
from harness.model.vocab import Served

MARGIN = 1.5
MIN_JUDGED = 3
WORDS_PER_TOKEN = 4  # more words than this per token (plus a few) is not a real token count


@dataclass(frozen=True)
class BatchJudgement:
    """How one batch's answers came back, with the figures the judgement rests on."""

    size: int
    verdict: Served
    last: float = math.nan  # when the last answer ended, seconds from the batch's start
    together: float = math.nan  # ... predicted for requests worked on together
    one_after_another: float = math.nan  # ... predicted for one request at a time
    why: str = ""  # untrusted: the count that is not plausible


def implausible(timing: RequestTiming, text: str, max_tokens: int | None) -> str | None:
    """Why a server's token count for one answer cannot be its real work, or None: more than
    the ``max_tokens`` it was asked for, or far fewer than the words of its text."""
    tokens = timing.tokens
    if tokens is None:
        return None
    if max_tokens is not None and tokens > max_tokens:
        return f"usage.completion_tokens {tokens} for one answer, above its max_tokens {max_tokens}"
    words = len(text.split())
    if words > WORDS_PER_TOKEN * max(tokens, 0) + WORDS_PER_TOKEN:
        return f"usage.completion_tokens {tokens} for an answer of {words} words"
    return None


def _work(timing: RequestTiming, text: str) -> float:
    """Tokens generated + 1; words of the text where the server gave no count."""
    tokens = timing.tokens if timing.tokens is not None else len(text.split())
    return float(max(tokens, 0) + 1)


def judge_batch(
    timings: Sequence[RequestTiming | None], texts: Sequence[str], max_tokens: int | None = None
) -> BatchJudgement:
    """Together, one after another, cannot tell, or (a token count the server could not have
    generated, ``max_tokens`` being what it was asked for) not to be trusted (see the module
    docstring)."""
    size = len(timings)
    if size < 2 or any(t is None for t in timings):
        return BatchJudgement(size, Served.UNJUDGED)
    for timing, text in zip(timings, texts):
        why = implausible(timing, text, max_tokens) if timing is not None else None
        if why is not None:
            return BatchJudgement(size, Served.UNTRUSTED, why=why)
    start = min(t.sent for t in timings if t is not None)
    rows = sorted(
        (t.finished - start, t.written - start, _work(t, text))
        for t, text in zip(timings, texts)
        if t is not None
    )
    first_end, first_arrival, first_work = rows[0]
    pace = (first_end - first_arrival) / first_work
    on_the_wire = max(arrival for _, arrival, _ in rows)
    if not pace > 0 or on_the_wire > first_arrival + (first_end - first_arrival) / 2:
        return BatchJudgement(size, Served.UNJUDGED)  # not in flight at once: nothing to compare
    together = max(arrival + work * pace for _, arrival, work in rows)
    serial = first_end
    for _, arrival, work in rows[1:]:
        serial = max(serial, arrival) + work * pace
    last = rows[-1][0]
    if serial < MARGIN * together:
        return BatchJudgement(size, Served.UNJUDGED, last, together, serial)
    verdict = Served.ONE_AFTER_ANOTHER if last > math.sqrt(together * serial) else Served.TOGETHER
    return BatchJudgement(size, verdict, last, together, serial)


def cell_notice(judgements: Sequence[BatchJudgement]) -> str | None:
    """The sentence saying a cell's batch positions were not exercised, or None (see the
    module docstring for the rule)."""
    untrusted = [j for j in judgements if j.verdict == Served.UNTRUSTED]
    if untrusted:
        return (
            f"the server's token counts are not plausible ({untrusted[0].why}; in "
            f"{len(untrusted)} of {len(judgements)} batches), so its timing cannot show that "
            f"it ran these {untrusted[0].size} requests together: batch positions were not "
            "shown to be exercised; test a server whose usage counts are real"
        )
    judged = [j for j in judgements if j.verdict not in (Served.UNJUDGED, Served.UNTRUSTED)]
    serial = [j for j in judged if j.verdict == Served.ONE_AFTER_ANOTHER]
    if len(judged) < MIN_JUDGED or 2 * len(serial) <= len(judged):
        return None
    size = judged[0].size
    return (
        f"the server answered these {size} requests one after another: batch positions "
        f"were not exercised ({len(serial)} of the {len(judged)} batches its timing could "
        f"judge, of {len(judgements)}, were served one request at a time); test a server that "
        "runs concurrent requests together (llama-server --parallel N, vLLM, trtllm-serve)"
    )
