"""Bad input, the options (issue #7): values that are zero, negative, not a number or given
twice, and combinations that make no sense; issue #15 adds bounds and options the backend
ignores, issues #23, #24 and #26 an unset key variable, KV-cache reuse where it cannot be set,
and batch-size ranges. Each case is refused in one line by `run` and by `pytest suites/`
(``refused``, tests/integration/conftest.py).
"""

from __future__ import annotations

import pytest

from tests.integration.common import Suites
from tests.integration.conftest import TOY, Case, Setup, refused

CASES = [
    # option values: zero, negative, not a number, duplicated, bad combinations
    Case("batch-sizes-zero", lambda s: ["--batch-sizes", "0"], ("--batch-sizes '0': 0 must be at least 1",)),
    Case(
        "batch-sizes-negative", lambda s: ["--batch-sizes=-2"], ("--batch-sizes '-2': -2 must be at least 1",)
    ),
    Case(
        "batch-sizes-not-numbers",
        lambda s: ["--batch-sizes", "1,two"],
        ("--batch-sizes '1,two': 'two' is not an integer", "e.g. 1,2,4,8"),
    ),
    Case(
        "batch-sizes-duplicated",
        lambda s: ["--batch-sizes", "1,4,1"],
        ("--batch-sizes '1,4,1': 1 is given twice", "list each value once"),
    ),
    Case(
        "beam-widths-duplicated",
        lambda s: ["--beam-widths", "2,2"],
        ("--beam-widths '2,2': 2 is given twice",),
    ),
    Case("beam-widths-zero", lambda s: ["--beam-widths", "0"], ("--beam-widths '0': 0 must be at least 1",)),
    Case(
        "max-new-tokens-zero",
        lambda s: ["--max-new-tokens", "0"],
        ("--max-new-tokens '0': must be at least 1",),
    ),
    Case(
        "max-new-tokens-negative",
        lambda s: ["--max-new-tokens=-1"],
        ("--max-new-tokens '-1': must be at least 1",),
    ),
    Case(
        "max-new-tokens-not-a-number",
        lambda s: ["--max-new-tokens", "many"],
        ("--max-new-tokens 'many': expected a positive integer",),
    ),
    Case("seed-negative", lambda s: ["--seed=-1"], ("--seed '-1': must be >= 0",)),
    Case(
        "tolerance-not-a-number", lambda s: ["--tolerance", "abc"], ("--tolerance 'abc': expected a number",)
    ),
    Case(
        "tolerance-negative", lambda s: ["--tolerance=-0.1"], ("--tolerance '-0.1': must be in [0.0, 1.0]",)
    ),
    Case("alpha-zero", lambda s: ["--alpha", "0"], ("--alpha '0': must be in (0.0, 0.5]",)),
    Case(
        "gpu-memory-not-a-size",
        lambda s: ["--gpu-memory", "lots"],
        ("--gpu-memory 'lots': expected a size like 80GiB",),
    ),
    Case(
        "batch-timeout-zero",
        lambda s: ["--batch-timeout", "0"],
        ("--batch-timeout '0': must be more than 0",),
    ),
    Case(
        "batch-timeout-not-a-number",
        lambda s: ["--batch-timeout", "soon"],
        ("--batch-timeout 'soon': expected a number",),
    ),
    Case(
        "prompt-template-without-text",
        lambda s: ["--prompt-template", "Summarize"],
        ("--prompt-template 'Summarize': must contain {text}",),
    ),
    Case(
        "golden-engine-without-update",
        lambda s: ["--golden-engine", str(s.engine)],
        ("--golden-engine is used only to record goldens: add --update-goldens",),
    ),
    Case(
        "server-option-without-server",
        lambda s: ["--model", "llama"],
        ("--model applies only to an OpenAI-compatible server",),
    ),
    # issue 15, the hostile round: bounds, and options a backend ignores
    Case(
        "batch-sizes-beyond-any-engine",
        lambda s: ["--batch-sizes", "1,100000"],  # 7: bounds
        ("--batch-sizes '1,100000'", "must be at most 65536"),
    ),
    Case(
        "max-new-tokens-beyond-bound",
        lambda s: ["--max-new-tokens", "99999999"],
        ("--max-new-tokens '99999999'", "must be at most 65536"),
    ),
    Case(
        "option-the-backend-ignores",
        lambda s: [*TOY, "--end-id", "5"],  # 12
        ("--end-id does not apply to the toy_engine:ToyEngine", "drop"),
    ),
    # issue 24 (the third hostile round) and issues 23, 26
    Case(
        "api-key-env-unset",
        lambda s: ["--engine", "http://127.0.0.1:9/v1", "--api-key-env", "HARNESS_TEST_NO_SUCH_KEY"],  # 24.2
        ("--api-key-env", "HARNESS_TEST_NO_SUCH_KEY"),
    ),
    Case(
        "kv-cache-reuse-on-for-a-backend-without-it",
        lambda s: ["--kv-cache-reuse", "on"],  # 23.3
        ("--kv-cache-reuse does not apply to the emulator backend", "drop it"),
    ),
    Case(
        "sweep-and-batch-sizes",
        lambda s: ["--sweep", "--batch-sizes", "1-4"],  # 26
        ("--sweep tests every batch size", "drop --batch-sizes"),
    ),
    Case(
        "batch-size-range-backwards",
        lambda s: ["--batch-sizes", "8-1"],  # 26
        ("--batch-sizes '8-1'", "runs backwards; write 1-8"),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Case, bad_input_setup: Setup, suites: Suites) -> None:
    refused(case, bad_input_setup, suites)
