"""The measurement model: what a run measures and decides, as report.json holds it.

Cells, build limits and their checks, per-prompt scores, the per-position tests, findings,
verdicts and every other vocabulary (as enums). It is the ground floor: it imports nothing of
the harness, so the statistics, the report writers and the readers of reports share these
types without loading engines, storage or the run's orchestration. report.json is this
model serialized (``harness.report.serialize``), and read back into it.
"""
