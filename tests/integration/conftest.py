"""What the bad-input modules share (test_bad_input_engines, _datasets, _options, _files and
_hostile): every bad input of issues #7, #15 and #24, case by case, through both entry points.

A case is refused (``refused``) by ``python -m harness run ARGS`` (exit 2, ``error: <one
line>``) and by ``pytest suites/ ARGS`` (exit 4, a usage error; pytester), both in this process;
the checks are the exit status, the words of the one message (the file, option or key it names
and the fix) and that no traceback is printed. Every case fails before anything is generated,
so the matrix takes seconds; ``test_bad_input.py`` runs a few of the same through a real
subprocess.
"""

from __future__ import annotations

import io
import json
import shutil
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness.__main__ import main
from harness.engines.emulator.build import BUNDLED_MODEL
from tests.integration.common import EngineFactory, Suites, grid_options

HERE = Path(__file__).resolve().parent
TOY = ("--engine", "toy_engine:ToyEngine")


@dataclass
class Setup:
    """What a case builds its arguments from (fresh per case, shared engine and dataset)."""

    tmp: Path
    engine: Path  # an emulator engine directory, 8 x 4 (shared: copy before changing it)
    dataset: Path  # 16 documents
    goldens: Path  # goldens recorded for TOY on `dataset` at batch size 1, beam 1
    engine_runs: int = 0  # how often a case changed the engine's weights (test_hostile_run)

    def engine_copy(self, change: Callable[[Path], object]) -> str:
        folder = self.tmp / "engine"
        shutil.copytree(self.engine, folder)
        change(folder)
        return str(folder)

    def config_copy(self, change: Callable[[dict[str, Any]], object]) -> str:
        def edit(folder: Path) -> None:
            config = json.loads((folder / "config.json").read_text())
            change(config)
            (folder / "config.json").write_text(json.dumps(config))

        return self.engine_copy(edit)

    def file(self, name: str, content: str | bytes) -> str:
        path = self.tmp / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        return str(path)

    def regular_file(self) -> Path:
        path = self.tmp / "plain-file"
        path.write_text("not a folder")
        return path

    def goldens_copy(self, change: Callable[[Path], object]) -> list[str]:
        folder = self.tmp / "goldens"
        shutil.copytree(self.goldens, folder)
        [path] = folder.glob("*/*.json")
        change(path)
        return self._goldens_args(folder)

    def goldens_linked(self) -> list[str]:
        """A goldens folder (as a pull request could commit it) whose identity folder is a
        symbolic link to a folder outside it, holding a file the run must not touch."""
        folder = self.tmp / "goldens"
        shutil.copytree(self.goldens, folder)
        [identity] = [p for p in folder.iterdir() if p.is_dir()]
        outside = self.tmp / "outside"
        identity.rename(outside)
        (outside / ".keep-me.json.abcdefgh").write_text("must stay")
        identity.symlink_to(outside, target_is_directory=True)
        return self._goldens_args(folder)

    def _goldens_args(self, folder: Path) -> list[str]:
        """A run of TOY on the dataset at batch size 1, beam 1, against the goldens in ``folder``."""
        return [
            *TOY,
            *grid_options(self.dataset, "1", "1"),
            "--goldens-dir",
            str(folder),
        ]

    def hf_pickle_model(self) -> str:
        """A transformers folder whose only weights are a pickle (pytorch_model.bin)."""
        folder = self.tmp / "hf-pickle"
        folder.mkdir()
        for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
            shutil.copy(BUNDLED_MODEL / name, folder / name)
        # a pickle that would create a file if anything unpickled it
        marker = self.tmp / "unpickled"
        (folder / "pytorch_model.bin").write_bytes(
            b"cos\nsystem\n(S'touch " + str(marker).encode() + b"'\ntR."
        )
        return str(folder)


@dataclass(frozen=True)
class Case:
    id: str
    args: Callable[[Setup], list[str]]
    words: tuple[str, ...]


def edit_json(path: Path, **changes: object) -> None:
    raw = json.loads(path.read_text())
    for key, value in changes.items():
        if "." in key:
            outer, inner = key.split(".")
            raw[outer][inner] = value
        else:
            raw[key] = value
    path.write_text(json.dumps(raw))


@pytest.fixture(scope="package")
def recorded_goldens(tmp_path_factory: pytest.TempPathFactory, small_dataset: Path) -> Path:
    """Goldens of the toy engine at beam 1, recorded once through the CLI."""
    tmp = tmp_path_factory.mktemp("recorded")
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, redirect_stdout(out), redirect_stderr(out):
        mp.syspath_prepend(str(HERE))
        code = main(
            [
                "run",
                *TOY,
                *grid_options(small_dataset, "1", "1"),
                "--update-goldens",
                "--goldens-dir",
                str(tmp / "goldens"),
                "--report-dir",
                str(tmp / "reports"),
            ]
        )
    assert code == 0, out.getvalue()
    return tmp / "goldens"


@pytest.fixture
def bad_input_setup(
    tmp_path: Path,
    engine_factory: EngineFactory,
    small_dataset: Path,
    recorded_goldens: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Setup:
    """A case's Setup: the shared engine (8 x 4), dataset and goldens; the test engines importable."""
    monkeypatch.syspath_prepend(str(HERE))
    return Setup(tmp=tmp_path, engine=engine_factory(8, 4), dataset=small_dataset, goldens=recorded_goldens)


def run_cli(args: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with redirect_stdout(out), redirect_stderr(out):
        try:
            code = main(["run", *args])
        except SystemExit as exc:  # argparse: usage line and exit 2
            code = int(exc.code or 0)
    return code, out.getvalue()


def run_pytest(suites: Suites, args: list[str]) -> tuple[int, str]:
    proc = suites("-q", *args)
    return proc.returncode, proc.stdout + "\n" + proc.stderr


def refused(case: Case, setup: Setup, suites: Suites) -> None:
    """The case's arguments are a usage error of `run` and of `pytest suites/`, in one line."""
    tmp_path = setup.tmp
    args = case.args(setup)
    if not any(a.startswith("--report-dir") for a in args):
        args += ["--report-dir", str(tmp_path / "reports")]
    if "--goldens-dir" not in args:
        args += ["--goldens-dir", str(tmp_path / "no-goldens")]
    if "--cache-dir" not in args:
        args += ["--cache-dir", str(tmp_path / "cache")]

    code, out = run_cli(args)
    assert code == 2, out
    lines = [line for line in out.splitlines() if "error:" in line]
    assert len(lines) == 1, out
    for words in case.words:
        assert words in lines[0], out
    assert "Traceback" not in out

    code, out = run_pytest(suites, args)
    assert code == 4, out
    assert "Traceback" not in out
    for words in case.words:
        assert words in out, out
    assert not (tmp_path / "unpickled").exists()  # no pickle was loaded, no shipped code ran
    assert not list((tmp_path / "reports").glob("*/generations.jsonl"))  # nothing was generated
