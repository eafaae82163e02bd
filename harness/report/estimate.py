"""How long a planned run's generation will take, from a throughput the user gives
(``--throughput``: sequences per second, or a previous run's report whose own rate is used)."""

from __future__ import annotations

from harness.config import RunConfig
from harness.errors import ConfigError
from harness.model.vocab import Rotation
from harness.progress import duration
from harness.report.serialize import load_report


def throughput(given: str, sequences: int) -> tuple[float, str]:
    """Sequences per second, and what the figure is: a number as given, or a previous run's
    own rate read from its report (a folder or its report.json)."""
    try:
        rate = float(given)
    except ValueError:
        rate = None
    if rate is not None:
        if not rate > 0:
            raise ConfigError(f"--throughput {given!r}: must be more than 0 sequences per second")
        return rate, f"--throughput {rate:g} sequences/s"
    try:
        report = load_report(given).report
    except ConfigError as exc:
        raise ConfigError(
            f"--throughput {given!r}: neither a number (sequences per second) nor a readable report ({exc})"
        ) from None
    seconds = report.timing.engine_generate_s
    if seconds <= 0 or report.method.sequences <= 0:
        raise ConfigError(
            f"--throughput {given}: that run generated nothing itself (all from the "
            "cache?); give a run made with --no-cache, or a number"
        )
    rate = report.method.sequences / seconds
    return rate, (
        f"{rate:.2f} sequences/s, the rate of {given} ({report.method.sequences:,} "
        f"sequences in {duration(seconds)} of engine time)"
    )


def estimate_line(config: RunConfig, sequences: int) -> str:
    """How long generation would take, or how to get an estimate."""
    if not config.throughput:
        return "estimate: none (add --throughput SEQUENCES_PER_S, or a previous run's report folder, for one)"
    rate, source = throughput(config.throughput, sequences)
    early = (
        " (at most: --looks stops each cell once its answer is known)"
        if config.design.looks > 1 and config.rotation == Rotation.FULL
        else ""
    )
    return f"estimate: about {duration(sequences / rate)} of generation at {source}{early}"
