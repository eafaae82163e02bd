"""Bad input, the files a run reads and writes (issue #7): goldens that cannot be used and
folders that cannot be written; issue #15 adds goldens nested too deep and a cache folder
under a file, issue #24 a goldens identity folder that is a symbolic link. Each case is refused
in one line by `run` and by `pytest suites/` (``refused``, tests/integration/conftest.py).
"""

from __future__ import annotations

import pytest

from tests.integration.common import Suites
from tests.integration.conftest import TOY, Case, Setup, edit_json, refused

CASES = [
    # goldens that cannot be used
    Case(
        "goldens-corrupt",
        lambda s: s.goldens_copy(lambda p: p.write_text("{not json")),
        ("-beam1.json: corrupt goldens", "--update-goldens"),
    ),
    Case(
        "goldens-truncated",
        lambda s: s.goldens_copy(lambda p: p.write_bytes(p.read_bytes()[:100])),
        ("-beam1.json: corrupt goldens", "--update-goldens"),
    ),
    Case(
        "goldens-empty-file",
        lambda s: s.goldens_copy(lambda p: p.write_text("")),
        ("-beam1.json: corrupt goldens", "--update-goldens"),
    ),
    Case(
        "goldens-other-schema-version",
        lambda s: s.goldens_copy(lambda p: edit_json(p, schema_version=2)),
        ("-beam1.json: goldens schema_version 2, this harness reads 1", "--update-goldens"),
    ),
    Case(
        "goldens-other-dataset-hash",
        lambda s: s.goldens_copy(lambda p: edit_json(p, **{"dataset.hash": "0" * 64})),
        ("-beam1.json: recorded for dataset hash 000000000000", "(its content changed)", "--update-goldens"),
    ),
    Case(
        "goldens-other-settings",
        lambda s: s.goldens_copy(lambda p: edit_json(p, **{"settings.max_new_tokens": 7})),
        (
            "-beam1.json: recorded with other decoding settings: max_new_tokens 7 (run: 64)",
            "--update-goldens",
        ),
    ),
    Case(
        "goldens-missing-key",
        lambda s: s.goldens_copy(lambda p: edit_json(p, outputs=["x"])),
        ("-beam1.json: 'outputs' must map document ids to texts", "--update-goldens"),
    ),
    # folders that cannot be written (this runs as root, where chmod stops nothing: a path
    # under a regular file cannot be created by anyone)
    Case(
        "report-dir-under-a-file",
        lambda s: [*TOY, "--report-dir", str(s.regular_file() / "reports")],
        ("--report-dir", "plain-file/reports: cannot create (Not a directory)", "choose a writable folder"),
    ),
    Case(
        "report-dir-is-a-file",
        lambda s: [*TOY, "--report-dir", str(s.regular_file())],
        ("--report-dir", "plain-file: cannot create (File exists)", "choose a writable folder"),
    ),
    Case(
        "goldens-dir-under-a-file",
        lambda s: [
            *TOY,
            "--dataset",
            str(s.dataset),
            "--update-goldens",
            "--goldens-dir",
            str(s.regular_file() / "g"),
        ],
        ("--goldens-dir", "plain-file/g: cannot create (Not a directory)", "drop --update-goldens"),
    ),
    # issue 15, the hostile round
    Case(
        "goldens-nested-too-deep",
        lambda s: s.goldens_copy(lambda p: p.write_text("[" * 100_000 + "]" * 100_000)),
        ("-beam1.json: corrupt goldens", "nested deeper than 64 levels"),
    ),
    Case(
        "cache-dir-under-a-file",
        lambda s: [
            "--engine",
            str(s.engine),
            "--dataset",
            str(s.dataset),
            "--cache-dir",
            str(s.regular_file() / "cache"),
        ],
        ("--cache-dir", "plain-file/cache: cannot create (Not a directory)", "--no-cache"),
    ),
    # issue 24, the third hostile round
    Case(
        "goldens-identity-folder-is-a-link",
        lambda s: s.goldens_linked(),  # 24.1
        ("a symbolic link (to ", "inside "),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Case, bad_input_setup: Setup, suites: Suites) -> None:
    refused(case, bad_input_setup, suites)
