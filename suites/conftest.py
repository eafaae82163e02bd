"""Suite-level wiring for the throughput benchmarks (pytest-benchmark).

The throughput tests run only when asked for with ``--benchmark-enable`` or
``--benchmark-only``: a plain ``pytest suites/`` skips them before any engine work, so the
quality suites stay as fast as without them. Machine info gains the accelerator, so
``--benchmark-compare`` warns when two runs were measured on different GPUs.
"""

from __future__ import annotations

import pytest

ASK = "--benchmark-enable (or --benchmark-only)"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "throughput: engine throughput benchmark; runs only with " + ASK)


def benchmarks_asked_for(config: pytest.Config) -> bool:
    """True when the user asked pytest-benchmark to measure."""
    return bool(config.getoption("benchmark_enable", False) or config.getoption("benchmark_only", False))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if benchmarks_asked_for(config):
        return
    skip = pytest.mark.skip(reason=f"throughput benchmarks run only when asked for: add {ASK}")
    for item in items:
        if item.get_closest_marker("throughput") is not None:
            item.add_marker(skip)


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config
) -> None:
    """Why tests were skipped, a line per reason (pytest says it only with -rs)."""
    chars = config.getoption("reportchars", "") or ""
    if any(c in chars for c in "sSaA"):
        return  # pytest lists them itself
    reasons: dict[str, int] = {}
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = getattr(report, "longrepr", None)
        reason = str(longrepr[2]) if isinstance(longrepr, tuple) and len(longrepr) == 3 else "skipped"
        reason = reason.removeprefix("Skipped: ")
        reasons[reason] = reasons.get(reason, 0) + 1
    for reason, count in reasons.items():
        terminalreporter.write_line(f"{count} skipped: {reason}")


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict[str, object]) -> None:
    """The accelerator the engine ran on (GPU name via torch.cuda, else the CPU)."""
    import torch

    from harness import __version__

    cuda = torch.cuda.is_available()
    machine_info["accelerator"] = {
        "device": "cuda" if cuda else "cpu",
        "gpu": torch.cuda.get_device_name(0) if cuda else None,
        "gpu_count": torch.cuda.device_count() if cuda else 0,
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
    }
    machine_info["harness"] = __version__
