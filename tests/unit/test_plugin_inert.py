"""The plugin loads in every pytest run of an environment it is installed in; it must stay
out of the way of test suites that do not ask for it. (pytester: a run in this process, the
plugin loaded through its entry point as in any other run.)"""

from __future__ import annotations

import pytest


def test_unrelated_suite_runs_without_the_engine(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x():\n    assert True\n")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert "batch-position harness" not in result.stdout.str()


def test_options_are_registered(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_inprocess("--help")
    out = result.stdout.str()
    assert "--beam-widths" in out and "--update-goldens" in out
