"""The plugin loads in every pytest run of an environment it is installed in; it must stay
out of the way of test suites that do not ask for it."""

from __future__ import annotations

pytest_plugins = ["pytester"]


def test_unrelated_suite_runs_without_the_engine(pytester):
    pytester.makepyfile("def test_x():\n    assert True\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert "batch-position harness" not in result.stdout.str()


def test_options_are_registered(pytester):
    result = pytester.runpytest_subprocess("--help")
    out = result.stdout.str()
    assert "--beam-widths" in out and "--update-goldens" in out
