"""Progress in a log: a line at a steady interval (done of total, rate, time left), then one
at the end; a terminal gets the bar instead."""

from __future__ import annotations

from harness.progress import ProgressLines, duration, progress_factory


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_log_gets_a_line_per_interval_with_rate_and_time_left() -> None:
    clock, lines = Clock(), list[str]()
    progress = ProgressLines(2880, lines.append, interval=30.0, clock=clock)
    clock.now += 10
    progress(40)  # 10 s in: too soon for a line
    assert lines == []
    clock.now += 20
    progress(80)  # 30 s in: 120 sequences, 4.0/s, 2,760 left = 11 min 30 s
    assert lines == ["progress: 120 of 2,880 sequences (4%), 4.0 sequences/s, about 11 min 30 s left"]
    clock.now += 5
    progress(8)
    assert len(lines) == 1  # the next line waits for the interval again
    clock.now += 685
    progress(2880 - 128)
    assert lines[-1] == "progress: all 2,880 sequences generated in 12 min 00 s (4.0 sequences/s)"


def test_durations_read_as_a_person_says_them() -> None:
    assert [duration(s) for s in (0, 42.4, 61, 585, 3600, 7530)] == [
        "0 s",
        "42 s",
        "1 min 01 s",
        "9 min 45 s",
        "1 h 00 min",
        "2 h 05 min",
    ]


def test_lines_when_the_output_is_not_a_terminal() -> None:
    lines: list[str] = []
    tick = progress_factory(lines.append, terminal=False)(4)
    assert isinstance(tick, ProgressLines)
    tick(4)
    assert lines and lines[-1].startswith("progress: all 4 sequences generated in")
