"""A beam width's scheduled passes kept in the generation cache and replayed by a rerun
(harness.stages.schedules.drive_width, harness.stages.recorded): replayed only where a run
with the same key kept them, as they were sent; kept only where every schedule ran and
happened; a damaged or edited entry is rejected and the passes sent again."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

import pytest

from harness.bounds import ScoringCap
from harness.config import DecodingSettings
from harness.engines.base import Engine, Generation, InFlight, Pending, RequestTiming
from harness.model.vocab import Schedule, Verdict
from harness.stages.schedules import Ground, drive_width
from harness.storage.cache import GenerationCache, _content_sha256
from harness.verdict.schedules import not_happened

SETTINGS = DecodingSettings(beam_width=1, max_new_tokens=8)
ALL = [Schedule.STAGGERED, Schedule.REFILL, Schedule.PREFILL_MIX, Schedule.WARM]
PROMPTS = [f"prompt {i} " + "word " * (i % 5) for i in range(12)]


class Served(InFlight):
    """Answers each prompt upper-cased, its slot the worker's, after a time that varies with
    the prompt (20-50 ms: uneven output lengths), timed as a server times its requests;
    ``at_once``: answered inside ``submit``, so nothing is ever in flight; a prompt in
    ``failing`` raises; ``fresh``: each opening's slots are its own (else a slot an earlier
    path used counts as reused, as a server's)."""

    cache = "a double's own prefix cache"

    def __init__(self, at_once: bool, failing: frozenset[str], fresh: bool) -> None:
        self.at_once, self.failing, self.fresh_slots = at_once, failing, fresh
        self.pool = ThreadPoolExecutor(4)
        self.t0 = time.perf_counter()

    def _answer(self, prompt: str) -> Generation:
        start = time.perf_counter() - self.t0
        if prompt in self.failing:
            raise RuntimeError("the double's own error")
        if not self.at_once:
            time.sleep(0.01 * self._tokens(prompt))
        name = threading.current_thread().name
        end = time.perf_counter() - self.t0
        return Generation(
            text=prompt.upper(),
            slot=int(name.rsplit("_", 1)[-1]) if "_" in name else 0,
            timing=RequestTiming(
                sent=start, written=start, first_byte=end, finished=end, tokens=self._tokens(prompt)
            ),
        )

    @staticmethod
    def _tokens(prompt: str) -> int:
        """Its output's length: 2 to 5 tokens of 10 ms each."""
        return 2 + len(prompt) % 4

    def submit(self, prompt: str) -> Pending:
        if self.at_once:
            done: Future[Generation] = Future()
            done.set_result(self._answer(prompt))
            return done
        return self.pool.submit(self._answer, prompt)

    def close(self) -> None:
        self.pool.shutdown(wait=True)


class Counted:
    """An engine whose in-flight path is ``Served``; counts its openings."""

    def __init__(
        self, at_once: bool = False, failing: frozenset[str] = frozenset(), fresh: bool = True
    ) -> None:
        self.opened = 0
        self.at_once, self.failing, self.fresh = at_once, failing, fresh

    def in_flight(self, settings: DecodingSettings) -> InFlight:
        self.opened += 1
        return Served(self.at_once, self.failing, self.fresh)


def ground(
    engine: Counted, cache: GenerationCache | None, concurrency: int = 4, timeout: float = 30.0
) -> Ground:
    n = len(PROMPTS)
    texts = [p.upper() for p in PROMPTS]
    return Ground(
        engine=cast(Engine, engine),
        prompts=PROMPTS,
        ids=[f"d{i}" for i in range(n)],
        references=[None] * n,
        lengths=[len(p) for p in PROMPTS],
        order=range(n),
        baseline=texts,
        against=texts,
        settings=SETTINGS,
        concurrency=concurrency,
        cap=ScoringCap.for_tokens(8),
        timeout=timeout,
        cache=cache,
    )


def cache_in(folder: Path) -> GenerationCache:
    return GenerationCache(folder, "f" * 64)


def entries(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.json"))


@pytest.mark.parametrize("fresh", [True, False], ids=["fresh-slots", "a-servers-slots"])
def test_a_rerun_replays_the_passes_as_they_were_sent_without_opening_the_engine(
    tmp_path: Path, fresh: bool
) -> None:
    """The same drives, slots reused across paths and the first waves' timing included."""
    engine = Counted(fresh=fresh)
    first, fixed = drive_width(ground(engine, cache_in(tmp_path)), ALL)
    assert fixed == [] and engine.opened == 3  # staggered, refill then warm on its path, prefill-mix
    assert all(not_happened(d) is None and not d.replayed for d in first)
    assert any(d.served is not None for d in first)  # first waves judged from the requests' timing
    if not fresh:  # a later path's requests find the slots an earlier path used
        assert any(r.slot_reused for d in first[1:] for r in d.requests)
    rerun = cache_in(tmp_path)
    again, fixed = drive_width(ground(engine, rerun), ALL)
    assert fixed == [] and engine.opened == 3  # nothing sent
    assert [dataclasses.replace(d, replayed=False) for d in again] == first and all(d.replayed for d in again)
    assert rerun.stats.passes_from_cache == 4 and rerun.stats.batches_rejected == 0
    assert "4 scheduled passes replayed" in rerun.stats.tally()


def test_a_kept_width_that_no_longer_happens_or_took_too_long_is_sent_again_and_kept_anew(
    tmp_path: Path,
) -> None:
    """Replayed only where this run's own rules pass it: every schedule happened, and every
    request came back within this run's --batch-timeout; else sent, and the entry overwritten."""
    engine = Counted()
    drive_width(ground(engine, cache_in(tmp_path)), ALL)
    (entry,) = entries(tmp_path)
    stored = json.loads(entry.read_text())
    for path in stored["passes"]:
        for records in path["passes"]:
            for r in records:
                r["in_flight"] = 0  # as if nothing had joined a running batch
    stored["sha256"] = _content_sha256(stored["key"], stored["passes"], None)
    entry.write_text(json.dumps(stored))
    rerun = cache_in(tmp_path)
    again, _ = drive_width(ground(engine, rerun), ALL)
    assert engine.opened == 6 and not any(d.replayed for d in again)
    assert all(not_happened(d) is None for d in again) and rerun.stats.passes_from_cache == 0
    assert json.loads(entry.read_text())["passes"] != stored["passes"]  # kept anew
    strict, _ = drive_width(ground(engine, cache_in(tmp_path), timeout=0.001), ALL)
    assert engine.opened == 9 and not any(d.replayed for d in strict)


def test_no_cache_or_another_plan_sends_them_again(tmp_path: Path) -> None:
    engine = Counted()
    drive_width(ground(engine, cache_in(tmp_path)), ALL)
    drive_width(ground(engine, None), ALL)  # --no-cache
    assert engine.opened == 6
    other, _ = drive_width(ground(engine, cache_in(tmp_path), concurrency=3), ALL)
    assert engine.opened == 9 and not any(d.replayed for d in other)
    fewer, _ = drive_width(ground(engine, cache_in(tmp_path)), [Schedule.STAGGERED])
    assert engine.opened == 10 and not any(d.replayed for d in fewer)


def test_an_edited_entry_is_rejected_and_the_passes_sent_again(tmp_path: Path) -> None:
    engine = Counted()
    drive_width(ground(engine, cache_in(tmp_path)), ALL)
    (entry,) = entries(tmp_path)
    stored = json.loads(entry.read_text())
    stored["passes"][0]["passes"][0][0]["generation"]["text"] = "A BETTER ANSWER"
    entry.write_text(json.dumps(stored))
    rerun = cache_in(tmp_path)
    again, _ = drive_width(ground(engine, rerun), ALL)
    assert engine.opened == 6 and not any(d.replayed for d in again)
    assert rerun.stats.batches_rejected == 1 and rerun.stats.passes_from_cache == 0


def _damage(passes: Any, how: str) -> None:
    """One way an entry can hold something other than the plan's passes."""
    first = passes[0]["passes"][0]
    if how == "missing":
        first.pop()  # a request missing
    elif how == "ranks":
        first[1]["rank"] = 0  # ranks out of order
    elif how == "bool":
        first[0]["in_flight"] = True  # not a count
    elif how == "generation":
        first[0]["generation"] = {"slot": 1}  # no text
    elif how == "fresh":
        passes[0]["fresh_slots"] = "yes"
    else:
        passes.pop()  # a path missing


@pytest.mark.parametrize("how", ["missing", "ranks", "bool", "generation", "fresh", "path"])
def test_an_intact_entry_that_does_not_hold_the_plans_passes_is_rejected(tmp_path: Path, how: str) -> None:
    """Written whole (its sha256 matches) but not the plan's passes: an older or buggy writer's."""
    engine = Counted()
    drive_width(ground(engine, cache_in(tmp_path)), ALL)
    (entry,) = entries(tmp_path)
    stored = json.loads(entry.read_text())
    _damage(stored["passes"], how)
    stored["sha256"] = _content_sha256(stored["key"], stored["passes"], None)
    entry.write_text(json.dumps(stored))
    rerun = cache_in(tmp_path)
    again, _ = drive_width(ground(engine, rerun), ALL)
    assert engine.opened == 6 and not any(d.replayed for d in again)
    assert rerun.stats.batches_rejected == 1 and rerun.stats.passes_from_cache == 0


def test_passes_that_did_not_happen_or_failed_are_not_kept(tmp_path: Path) -> None:
    quick = Counted(at_once=True)  # answered before the next is sent: nothing ever in flight
    ran, _ = drive_width(ground(quick, cache_in(tmp_path)), ALL)
    assert any(not_happened(d) for d in ran) and entries(tmp_path) == []
    broken = Counted(failing=frozenset({PROMPTS[3]}))
    _, fixed = drive_width(ground(broken, cache_in(tmp_path)), ALL)
    assert fixed and all(c.verdict == Verdict.ERROR for c in fixed) and entries(tmp_path) == []
