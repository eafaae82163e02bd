"""Every bad input of issue #7, case by case, through both entry points.

Each case runs ``python -m harness run ARGS`` (exit 2, ``error: <one line>``) and
``pytest suites/ ARGS`` (exit 4, a usage error; pytester) in this process, and asserts the exit
status, the words of the one message (the file, option or key it names and the fix) and
that no traceback is printed. Every case fails before anything is generated, so the matrix
takes seconds; ``test_bad_input.py`` runs a few of the same through a real subprocess.

Issue #15 (the hostile round) adds a case per class it fixed: refused in one line above
(2 literal dataset paths, 4 guarded backend calls, 6 JSON depth, 7 bounds, 12 options a
backend ignores), and, in ``test_hostile_run``, what is not a usage error (1 the cache key,
5 Ctrl-C and a full disk, 8b the scoring cap, 10 Markdown in names).
"""

from __future__ import annotations

import io
import json
import shutil
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.__main__ import main
from harness.engines.emulator.build import BUNDLED_MODEL
from tests.conftest import SUITES, SuitesRun

HERE = Path(__file__).resolve().parent
TOY = ("--engine", "toy_engine:ToyEngine")


@dataclass
class Setup:
    """What a case builds its arguments from (fresh per case, shared engine and dataset)."""

    tmp: Path
    engine: Path  # an emulator engine directory, 8 x 4 (shared: copy before changing it)
    dataset: Path  # 16 documents
    goldens: Path  # goldens recorded for TOY on `dataset` at batch size 1, beam 1

    def engine_copy(self, change: Callable[[Path], object]) -> str:
        folder = self.tmp / "engine"
        shutil.copytree(self.engine, folder)
        change(folder)
        return str(folder)

    def config_copy(self, change: Callable[[dict], object]) -> str:
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
        return [
            *TOY,
            "--dataset",
            str(self.dataset),
            "--batch-sizes",
            "1",
            "--beam-widths",
            "1",
            "--goldens-dir",
            str(folder),
        ]

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
        return [
            *TOY,
            "--dataset",
            str(self.dataset),
            "--batch-sizes",
            "1",
            "--beam-widths",
            "1",
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


def _tokenizer_ships_code(marker: Path) -> Callable[[Path], None]:
    """The engine's tokenizer points at code in its folder, which would create ``marker``."""

    def change(folder: Path) -> None:
        tok = folder / "tokenizer"
        (tok / "evil.py").write_text(
            f"open({str(marker)!r}, 'w').write('ran')\n"
            "from transformers import PreTrainedTokenizerFast\n"
            "class EvilTokenizer(PreTrainedTokenizerFast):\n    pass\n"
        )
        _edit_json(
            tok / "tokenizer_config.json",
            tokenizer_class="EvilTokenizer",
            auto_map={"AutoTokenizer": ["evil.EvilTokenizer", "evil.EvilTokenizer"]},
        )

    return change


def _edit_json(path: Path, **changes: object) -> None:
    raw = json.loads(path.read_text())
    for key, value in changes.items():
        if "." in key:
            outer, inner = key.split(".")
            raw[outer][inner] = value
        else:
            raw[key] = value
    path.write_text(json.dumps(raw))


def _nested_config(folder: Path) -> None:
    """config.json with one key nested 100,000 arrays deep (json.loads would recurse)."""
    text = (folder / "config.json").read_text()
    (folder / "config.json").write_text(
        '{"deep": ' + "[" * 100_000 + "]" * 100_000 + ", " + text.lstrip()[1:]
    )


@dataclass(frozen=True)
class Case:
    id: str
    args: Callable[[Setup], list[str]]
    words: tuple[str, ...]


def _pretrained(key: str, value: object) -> Callable[[dict], None]:
    return lambda c: c["pretrained_config"].__setitem__(key, value)


def _bigger_vocab(c: dict) -> None:
    c["pretrained_config"]["vocab_size"] += 1000


CASES = [
    # the engine directory and its config.json
    Case(
        "engine-missing",
        lambda s: ["--engine", str(s.tmp / "nope")],
        ("--engine", "nope: no such engine directory", "build-engine"),
    ),
    Case(
        "engine-not-a-directory",
        lambda s: ["--engine", str(s.regular_file())],
        ("--engine", "plain-file: is not a directory", "give an engine or model folder"),
    ),
    Case(
        "config-missing",
        lambda s: ["--engine", s.engine_copy(lambda f: (f / "config.json").unlink())],
        ("config.json: missing", "trtllm-build"),
    ),
    Case(
        "config-invalid-json",
        lambda s: ["--engine", s.engine_copy(lambda f: (f / "config.json").write_text("{oops"))],
        ("config.json: invalid JSON at line 1", "rebuild the engine"),
    ),
    Case(
        "config-not-an-object",
        lambda s: ["--engine", s.engine_copy(lambda f: (f / "config.json").write_text("[1, 2]"))],
        ("config.json: expected a JSON object at the top level",),
    ),
    Case(
        "config-limit-wrong-type",
        lambda s: [
            "--engine",
            s.config_copy(lambda c: c["build_config"].__setitem__("max_beam_width", "four")),
        ],
        ("config.json: build_config.max_beam_width must be a positive integer, found 'four'",),
    ),
    Case(
        "config-section-wrong-type",
        lambda s: ["--engine", s.config_copy(lambda c: c.__setitem__("pretrained_config", [1]))],
        ("config.json: pretrained_config must be a JSON object, found list",),
    ),
    Case(
        "config-model-key-wrong-type",
        lambda s: ["--engine", s.config_copy(_pretrained("vocab_size", "big"))],
        ("config.json: pretrained_config.vocab_size must be a positive integer, found 'big'",),
    ),
    Case(
        "weights-missing",
        lambda s: ["--engine", s.engine_copy(lambda f: (f / "rank0.safetensors").unlink())],
        ("rank0.safetensors: engine weights missing", "rebuild the engine"),
    ),
    Case(
        "weights-unreadable",
        lambda s: ["--engine", s.engine_copy(lambda f: (f / "rank0.safetensors").write_bytes(b"garbage"))],
        ("rank0.safetensors: cannot read weights", "rebuild the engine"),
    ),
    Case(
        "tokenizer-missing",
        lambda s: ["--engine", s.engine_copy(lambda f: shutil.rmtree(f / "tokenizer"))],
        ("tokenizer: tokenizer missing", "rebuild the engine"),
    ),
    Case(
        "tokenizer-smaller-than-vocab",
        lambda s: ["--engine", s.config_copy(_bigger_vocab)],
        (
            "tokenizer: the tokenizer knows 1280 tokens but the engine's vocab_size is 2280",
            "use the model's own tokenizer",
        ),
    ),
    Case(
        "hf-pickle-weights-refused",
        lambda s: ["--engine", s.hf_pickle_model()],
        ("hf-pickle: no *.safetensors weights", "loads safetensors only", "safe_serialization=True"),
    ),
    Case(
        "tokenizer-ships-code",
        lambda s: ["--engine", s.engine_copy(_tokenizer_ships_code(s.tmp / "unpickled"))],
        (
            "tokenizer: the tokenizer ships its own code",
            "which the emulator never runs",
            "rebuild the engine",
        ),
    ),
    Case(
        "backend-unknown",
        lambda s: ["--backend", "emulater", "--engine", str(s.engine)],
        ("--backend 'emulater': unknown backend; did you mean 'emulator'?",),
    ),
    Case(
        "backend-class-not-importable",
        lambda s: ["--engine", "nosuch_module:Engine"],
        ("--engine 'nosuch_module:Engine': cannot import 'nosuch_module'",),
    ),
    # the dataset
    Case(
        "dataset-missing",
        lambda s: [*TOY, "--dataset", str(s.tmp / "none.jsonl")],
        (
            "--dataset",
            "none.jsonl: no such file",
        ),
    ),
    Case(
        "dataset-empty",
        lambda s: [*TOY, "--dataset", s.file("empty.jsonl", "")],
        ("--dataset", "empty.jsonl: holds no rows"),
    ),
    Case(
        "dataset-blank-lines",
        lambda s: [*TOY, "--dataset", s.file("blank.jsonl", "\n  \n")],
        ("--dataset", "blank.jsonl: holds no rows"),
    ),
    Case(
        "dataset-not-utf8",
        lambda s: [
            *TOY,
            "--dataset",
            s.file("latin1.jsonl", '{"text": "caf\xe9 au lait", "summary": "x"}\n'.encode("latin-1")),
        ],
        ("--dataset", "latin1.jsonl: not UTF-8 text (byte 13)", "re-save the file as UTF-8"),
    ),
    Case(
        "dataset-text-field-missing",
        lambda s: [
            *TOY,
            "--dataset",
            s.file("article.jsonl", json.dumps({"article": "a b c", "summary": "x"}) + "\n"),
        ],
        ("article.jsonl: no field 'text' (fields: article, summary)", "--text-field"),
    ),
    Case(
        "dataset-summary-field-missing",
        lambda s: [*TOY, "--dataset", str(s.dataset), "--summary-field", "abstract"],
        ("no field 'abstract'", "name the right one with --summary-field"),
    ),
    Case(
        "dataset-empty-text",
        lambda s: [
            *TOY,
            "--dataset",
            s.file("blanktext.jsonl", json.dumps({"text": " ", "summary": "x"}) + "\n"),
        ],
        ("blanktext.jsonl: row 0 has an empty or non-text 'text'", "fix or drop that row"),
    ),
    Case(
        "dataset-duplicate-ids",
        lambda s: [
            *TOY,
            "--dataset",
            s.file(
                "dup.jsonl",
                "".join(json.dumps({"id": "same", "text": "a b", "summary": "x"}) + "\n" for _ in range(2)),
            ),
        ],
        ("dup.jsonl: id 'same' appears twice", "ids must be unique"),
    ),
    Case(
        "dataset-unknown-type",
        lambda s: [*TOY, "--dataset", s.file("notes.txt", "hello")],
        ("notes.txt: unknown file type '.txt'", ".jsonl"),
    ),
    Case(
        "fewer-prompts-than-positions",
        lambda s: [*TOY, "--dataset", str(s.dataset), "--batch-sizes", "32"],
        ("needs at least 32 prompts",),
    ),
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
        lambda s: s.goldens_copy(lambda p: _edit_json(p, schema_version=2)),
        ("-beam1.json: goldens schema_version 2, this harness reads 1", "--update-goldens"),
    ),
    Case(
        "goldens-other-dataset-hash",
        lambda s: s.goldens_copy(lambda p: _edit_json(p, **{"dataset.hash": "0" * 64})),
        ("-beam1.json: recorded for dataset hash 000000000000", "(its content changed)", "--update-goldens"),
    ),
    Case(
        "goldens-other-settings",
        lambda s: s.goldens_copy(lambda p: _edit_json(p, **{"settings.max_new_tokens": 7})),
        (
            "-beam1.json: recorded with other decoding settings: max_new_tokens 7 (run: 64)",
            "--update-goldens",
        ),
    ),
    Case(
        "goldens-missing-key",
        lambda s: s.goldens_copy(lambda p: _edit_json(p, outputs=["x"])),
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
    # issue 15, the hostile round: each class its fix refuses in one line
    Case(
        "dataset-name-datasets-cannot-read",
        lambda s: [
            *TOY,
            "--dataset",
            s.file("a::b.jsonl", s.dataset.read_text()),
        ],  # 2: a literal path, never a pattern
        ("a::b.jsonl: `datasets` cannot read this file name",),
    ),
    Case(
        "count-tokens-raises",
        lambda s: [
            "--engine",
            "fault_engines:CountRaises",
            "--dataset",
            str(s.dataset),
        ],  # 4: backend calls guarded
        ("count_tokens raised ValueError: tokenizer.json: unknown normalizer",),
    ),
    Case(
        "count-tokens-wrong-shape",
        lambda s: ["--engine", "fault_engines:CountsWrong", "--dataset", str(s.dataset)],
        ("count_tokens returned int for 16 prompts",),
    ),
    Case(
        "engine-module-raises-on-import",
        lambda s: ["--engine", "raises_on_import:Engine"],
        ("importing 'raises_on_import' raised RuntimeError: CUDA driver",),
    ),
    Case(
        "config-nested-too-deep",
        lambda s: ["--engine", s.engine_copy(_nested_config)],  # 6
        ("config.json", "nested deeper than 64 levels"),
    ),
    Case(
        "goldens-nested-too-deep",
        lambda s: s.goldens_copy(lambda p: p.write_text("[" * 100_000 + "]" * 100_000)),
        ("-beam1.json: corrupt goldens", "nested deeper than 64 levels"),
    ),
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
        "config-limit-beyond-any-engine",
        lambda s: [
            "--engine",
            s.config_copy(lambda c: c["build_config"].__setitem__("max_batch_size", 10**30)),
        ],
        ("config.json: build_config.max_batch_size", "above 65536"),
    ),
    Case(
        "option-the-backend-ignores",
        lambda s: [*TOY, "--end-id", "5"],  # 12
        ("--end-id does not apply to the toy_engine:ToyEngine", "drop"),
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
    # issue 24 (the third hostile round) and issues 23, 26: refused in one line, before anything
    Case(
        "goldens-identity-folder-is-a-link",
        lambda s: s.goldens_linked(),  # 24.1
        ("a symbolic link (to ", "inside "),
    ),
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


@pytest.fixture(scope="module")
def recorded_goldens(tmp_path_factory, small_dataset: Path) -> Path:
    """Goldens of the toy engine at beam 1, recorded once through the CLI."""
    tmp = tmp_path_factory.mktemp("recorded")
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, redirect_stdout(out), redirect_stderr(out):
        mp.syspath_prepend(str(HERE))
        code = main(
            [
                "run",
                *TOY,
                "--dataset",
                str(small_dataset),
                "--batch-sizes",
                "1",
                "--beam-widths",
                "1",
                "--update-goldens",
                "--goldens-dir",
                str(tmp / "goldens"),
                "--report-dir",
                str(tmp / "reports"),
            ]
        )
    assert code == 0, out.getvalue()
    return tmp / "goldens"


def _cli(args: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with redirect_stdout(out), redirect_stderr(out):
        try:
            code = main(["run", *args])
        except SystemExit as exc:  # argparse: usage line and exit 2
            code = int(exc.code or 0)
    return code, out.getvalue()


def _pytest(suites: Callable[..., SuitesRun], args: list[str]) -> tuple[int, str]:
    proc = suites("-q", *args)
    return proc.returncode, proc.stdout + "\n" + proc.stderr


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(
    case: Case,
    tmp_path: Path,
    engine_factory,
    small_dataset: Path,
    recorded_goldens: Path,
    monkeypatch,
    suites,
):
    monkeypatch.syspath_prepend(str(HERE))
    setup = Setup(tmp=tmp_path, engine=engine_factory(8, 4), dataset=small_dataset, goldens=recorded_goldens)
    args = case.args(setup)
    if not any(a.startswith("--report-dir") for a in args):
        args += ["--report-dir", str(tmp_path / "reports")]
    if "--goldens-dir" not in args:
        args += ["--goldens-dir", str(tmp_path / "no-goldens")]
    if "--cache-dir" not in args:
        args += ["--cache-dir", str(tmp_path / "cache")]

    code, out = _cli(args)
    assert code == 2, out
    lines = [line for line in out.splitlines() if "error:" in line]
    assert len(lines) == 1, out
    for words in case.words:
        assert words in lines[0], out
    assert "Traceback" not in out

    code, out = _pytest(suites, args)
    assert code == 4, out
    assert "Traceback" not in out
    for words in case.words:
        assert words in out, out
    assert not (tmp_path / "unpickled").exists()  # no pickle was loaded, no shipped code ran
    assert not list((tmp_path / "reports").glob("*/generations.jsonl"))  # nothing was generated


def test_batch_size_above_the_engine_maximum(
    tmp_path: Path, engine_factory, small_dataset: Path, suites, capsys
):
    """A failing test (not a usage error): the limits suite and lint name the trtllm-build flag.
    `run` itself goes on and generates, as the emulator accepts the batch (see the incident)."""
    engine = str(engine_factory(8, 4))
    proc = suites(
        "-q",
        "--engine",
        engine,
        "--batch-sizes",
        "16",
        "--beam-widths",
        "1",
        "--dataset",
        str(small_dataset),
        "--report-dir",
        str(tmp_path / "reports"),
        suite=SUITES / "test_preflight.py",
    )
    code, out = proc.returncode, proc.stdout
    assert code == 1, out
    assert "FAILED" in out and "test_engine_limits[bs16-beam1]" in out
    assert (
        "batch size 16 exceeds the engine's max_batch_size 8; rebuild with trtllm-build --max_batch_size 16"
        in out
    )
    assert "Traceback" not in out
    capsys.readouterr()  # the run's output, echoed by pytester
    code = main(["lint", engine, "--batch-size", "16"])
    out = capsys.readouterr().out
    assert code == 1 and "FAIL    max_batch_size   batch size 16 exceeds" in out and "Traceback" not in out


# Issue 15, the hostile round: inputs and events that are not usage errors. Each runs through
# ``python -m harness run`` and ``pytest suites/`` (in this process, an Echo engine: seconds)
# and asserts the exit status, at most one line of error with its words, no traceback, and
# what the fix keeps or shows.


@dataclass(frozen=True)
class Hostile:
    id: str
    args: Callable[[Setup], list[str]]
    codes: tuple[int, int]  # exit status of `run`, of `pytest suites/`
    words: tuple[str, ...] = ()  # in the one line of error ((): no error line at all)
    before: Callable[[Setup, pytest.MonkeyPatch], object] = lambda s, mp: None  # each run
    check: Callable[[Path], object] = lambda folder: None  # the newest report folder


def _echo(s: Setup, name: str = "echo-engine", backend: str = "fault_engines:Echo", *extra: str) -> list[str]:
    """A folder engine (so the generation cache is on) answered by a fault engine."""
    folder = s.tmp / name
    folder.mkdir(exist_ok=True)
    (folder / "weights.bin").write_text("echo")
    return [
        "--engine",
        str(folder),
        "--backend",
        backend,
        "--dataset",
        str(s.dataset),
        "--batch-sizes",
        "1,2",
        "--beam-widths",
        "1",
        *extra,
    ]


def _change_weights(s: Setup, mp: pytest.MonkeyPatch) -> None:
    """Class 1: a first run fills the cache, then the engine's weights change under it."""
    args = _echo(s) + [
        "--report-dir",
        str(s.tmp / "seed"),
        "--cache-dir",
        str(s.tmp / "cache"),
        "--goldens-dir",
        str(s.tmp / "no-goldens"),
    ]
    assert _cli(args)[0] == 0
    s.engine_runs = getattr(s, "engine_runs", 0) + 1
    (s.tmp / "echo-engine" / "weights.bin").write_text(f"other weights {s.engine_runs}")


def _nothing_from_cache(folder: Path) -> None:
    cache = json.loads((folder / "report.json").read_text())["cache"]
    assert cache["enabled"] and cache["generations_from_cache"] == 0, cache


def _disk_fills(s: Setup, mp: pytest.MonkeyPatch) -> None:
    """Class 5: generations.jsonl has room for about one cell, then the disk is full."""
    import errno

    from harness.storage import generations

    real_open, room = open, len(s.dataset.read_bytes()) // 4

    class Filling:
        def __init__(self, file: object) -> None:
            self.file, self.room = file, room

        def write(self, data: bytes) -> int:
            if len(data) > self.room:
                raise OSError(errno.ENOSPC, "No space left on device")
            self.room -= len(data)
            return self.file.write(data)  # type: ignore[attr-defined]

        def __getattr__(self, name: str) -> object:
            return getattr(self.file, name)

    def filling_open(path, mode="r", *args, **kwargs):  # type: ignore[no-untyped-def]
        file = real_open(path, mode, *args, **kwargs)
        return Filling(file) if "a" in mode else file

    mp.setattr(generations, "open", filling_open, raising=False)


def _capped(folder: Path) -> None:
    report = json.loads((folder / "report.json").read_text())
    for cell in report["cells"]:
        [check] = [c for c in cell["limit_checks"] if c["name"] == "output_length"]
        assert check["status"] == "warn" and "ran past 8 x --max-new-tokens words" in check["message"]
    rows = (folder / "generations.jsonl").read_text().splitlines()
    assert all(len(json.loads(r)["output"].split()) > 300 for r in rows)  # kept whole


NAME = "x`\n# PASS <b>*|_[x]"


def _escaped(folder: Path) -> None:
    from harness.report.markdown import md

    lines = (folder / "report.md").read_text().splitlines()
    headings = [line for line in lines if line.startswith("#")]
    assert headings[0].startswith("# Batch-position report:") and not any(
        "PASS <" in h or h.startswith("# PASS") for h in headings
    ), headings
    assert any(line.startswith("- Engine: ") and md(str(Path(NAME).name)) in line for line in lines)
    assert "run by me\\\\n\\# FAIL" in lines[lines.index("## Sign-off") + 2]


HOSTILE = [
    Hostile(
        "cache-after-the-weights-change",
        _echo,
        (0, 0),  # 1: the key covers engine files
        before=_change_weights,
        check=_nothing_from_cache,
    ),
    Hostile(
        "ctrl-c-while-generating",
        lambda s: _echo(s, "echo-engine", "fault_engines:Interrupts"),
        (130, 130),
        (
            "interrupted:",
            "kept in the generation cache",
            "generations.jsonl",
            "rerun the same command to resume",
        ),
    ),  # 5
    Hostile(
        "disk-full-while-generations-stream",
        _echo,
        (2, 4),  # 5
        (
            "generations.jsonl: cannot write (No space left on device)",
            "the 1 cells completed before are kept in it",
        ),
        before=_disk_fills,
    ),
    Hostile(
        "runaway-outputs-are-scored-capped",  # 8b: ROUGE-L on 8 x --max-new-tokens words
        lambda s: _echo(s, "echo-engine", "fault_engines:Runaway", "--max-new-tokens", "8"),
        (0, 0),
        before=lambda s, mp: mp.setenv("RUNAWAY_WORDS", "400"),
        check=_capped,
    ),
    Hostile(
        "names-with-markdown-in-report-md",  # 10
        lambda s: _echo(s, NAME, "fault_engines:Echo", "--signoff-by", "me\n# FAIL"),
        (0, 0),
        check=_escaped,
    ),
]


@pytest.mark.parametrize("case", HOSTILE, ids=[c.id for c in HOSTILE])
def test_hostile_run(case: Hostile, tmp_path: Path, small_dataset: Path, monkeypatch, suites):
    monkeypatch.syspath_prepend(str(HERE))
    setup = Setup(
        tmp=tmp_path, engine=tmp_path / "unused", dataset=small_dataset, goldens=tmp_path / "unused"
    )
    args = [
        *case.args(setup),
        "--report-dir",
        str(tmp_path / "reports"),
        "--goldens-dir",
        str(tmp_path / "no-goldens"),
        "--cache-dir",
        str(tmp_path / "cache"),
    ]
    for kind, code in zip(("run", "pytest"), case.codes):
        with pytest.MonkeyPatch.context() as mp:
            case.before(setup, mp)
            got, out = _cli(args) if kind == "run" else _pytest(suites, args)
        assert got == code, f"{kind}: {out}"
        assert "Traceback" not in out and "KeyboardInterrupt" not in out, f"{kind}: {out}"
        if kind == "run":
            errors = [
                line for line in out.splitlines() if line.startswith("error:") or "interrupted:" in line
            ]
            assert len(errors) == (1 if case.words else 0), out
        for words in case.words:
            assert words in out, f"{kind}: {out}"
        if not case.words:
            folders = sorted((tmp_path / "reports").glob("*/report.json"), key=lambda p: p.stat().st_mtime_ns)
            case.check(folders[-1].parent)
