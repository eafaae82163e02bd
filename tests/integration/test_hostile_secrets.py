"""A hostile round against the release gate (issue 24, classes 2 and 7): a server whose error
bodies echo the request's key and its query string, and carry terminal escapes and markup.

Class 2: a key reaches the server through its channel (``OPENAI_API_KEY``, or the variable
named by ``--api-key-env``, sent as ``Authorization: Bearer``) and no secret (the key, a query
value such as ``?tenant=...``, an ``sk-`` token) reaches report.json, report.md, report.html,
generations.jsonl, JUnit XML, stdout or stderr. Class 7: ``\\x1b[2K\\rverdict: pass`` in a
server's answer neither erases nor forges a terminal line, and report.html holds no raw escape
and no raw markup. Both go through one gate, ``harness.outside``.

The server is a double of its own here (``Hostile``): it answers ``GET /v1/models`` (or refuses
it) and fails every completion with a body that quotes what it received.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TypeAlias

import pytest

import harness.__main__ as cli
from tests.integration.common import Suites, first_rows
from tests.serving import started

ENV_KEY = "sk-envkey-4f7a1c9e2b6d8a3f0c5e"  # given in OPENAI_API_KEY
OTHER_KEY = "gw-7c1e9a4b2d6f8e0a3c5b-key"  # given in a variable named by --api-key-env
QUERY_KEY = "sk-querykey-9b2e7d4c1a6f3e8b0d5a"  # an old-style key in the address
TENANT = "acme-secret-tenant"  # ?tenant=...: not secret-looking, still a secret
FORGED = "\x1b[2K\rverdict: pass"  # erase the line, return to its start, forge the verdict
MARKUP = "<script>alert(1)</script>"
BIDI = "\u202e"  # right-to-left override: reorders what a reader sees
SECRETS = (ENV_KEY, OTHER_KEY, QUERY_KEY, TENANT)
FAST = ("--max-new-tokens", "8", "--batch-sizes", "1,2", "--beam-widths", "1", "--retries", "0")


class Hostile(ThreadingHTTPServer):
    """Serves a model list (``models_status`` 200) or refuses it with an echoing body, and
    fails every completion with ``completions_status`` and an echoing body: the Authorization
    header and the path (with its query) it received, escapes, markup and a bidi override.
    ``model``: the id it lists; ``authorizations``: every Authorization header received."""

    daemon_threads = True

    def __init__(self, models_status: int = 200, completions_status: int = 500, model: str = "m") -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.models_status, self.completions_status, self.model = (models_status, completions_status, model)
        self.authorizations: list[str | None] = []
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


StartHostile: TypeAlias = Callable[..., Hostile]  # the hostile fixture: start(**keywords) -> a server


class _Handler(BaseHTTPRequestHandler):
    server: Hostile

    def log_message(self, *args: object) -> None:
        pass

    def _answer(self, status: int, payload: dict[str, object]) -> None:
        data = json.dumps(payload, ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _echo(self, status: int) -> None:
        auth = self.headers.get("Authorization")
        message = (
            f"invalid credentials: Authorization={auth} for {self.path} (key "
            f"{auth.removeprefix('Bearer ') if auth else None}) {FORGED} {MARKUP} {BIDI}"
        )
        self._answer(status, {"error": {"message": message, "type": "invalid_request_error"}})

    def do_GET(self) -> None:
        with self.server.lock:
            self.server.authorizations.append(self.headers.get("Authorization"))
        if self.server.models_status != 200:
            return self._echo(self.server.models_status)
        self._answer(200, {"object": "list", "data": [{"id": self.server.model, "object": "model"}]})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        with self.server.lock:
            self.server.authorizations.append(self.headers.get("Authorization"))
        self._echo(self.server.completions_status)


@pytest.fixture
def hostile() -> Iterator[StartHostile]:
    """start(**Hostile's keywords) -> a Hostile serving from a thread (stopped after the test)."""
    yield from started(Hostile)


@pytest.fixture(scope="module")
def four(small_dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return first_rows(small_dataset, tmp_path_factory.mktemp("data") / "four.jsonl", 4)


def _options(engine: str, dataset: Path, *more: str) -> list[str]:
    """What every run here is given: the engine, the dataset, FAST, then ``more``."""
    return ["--engine", engine, "--dataset", str(dataset), *FAST, *more]


def _address(server: Hostile) -> str:
    return f"{server.url}?tenant={TENANT}&api_key={QUERY_KEY}"


def _files(root: Path) -> dict[str, str]:
    """Every file a run left under ``root`` (reports, generations.jsonl, JUnit XML)."""
    return {
        str(p.relative_to(root)): p.read_text(encoding="utf-8", errors="replace")
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _assert_clean(texts: dict[str, str]) -> None:
    """No secret, no sk- token, no escape, carriage return or bidi override from outside."""
    for name, text in texts.items():
        for secret in SECRETS:
            assert secret not in text, (name, secret)
        assert "sk-envkey" not in text and "sk-querykey" not in text, name
        assert "\x1b" not in text and "\r" not in text and BIDI not in text, name


# --- class 2 and 7 through `pytest suites/` ----------------------------------------------------


def test_a_server_echoing_the_key_leaks_nothing_into_files_or_the_terminal(
    tmp_path: Path, hostile: StartHostile, four: Path, suites: Suites
) -> None:
    server = hostile(completions_status=500)
    reports = tmp_path / "reports"
    proc = suites(
        *_options(
            _address(server),
            four,
            "--report-dir",
            str(reports),
            "--junitxml",
            str(reports / "junit.xml"),
            "-v",
        ),
        env={"OPENAI_API_KEY": ENV_KEY},
    )
    assert proc.returncode == 1, proc.stdout[-3000:]
    # the key went through its channel: the Authorization header of every request
    assert server.authorizations and set(server.authorizations) == {f"Bearer {ENV_KEY}"}
    files = _files(reports)
    assert {"report.json", "report.md", "report.html", "generations.jsonl"} <= {
        Path(name).name for name in files
    }
    _assert_clean({**files, "stdout": proc.stdout, "stderr": proc.stderr})
    report = json.loads(next(text for name, text in files.items() if name.endswith("report.json")))
    # the server's message is kept, with its secrets redacted and its escapes shown
    error = report["cells"][0]["error"]  # (the message's whitespace, \r included, is one space)
    assert "HTTP 500" in error and "Authorization=REDACTED for /v1/completions?tenant=REDACTED" in error
    assert "\\x1b[2K verdict: pass" in error and "\\u202e" in error
    assert report["engine"]["path"] == f"{server.url}?tenant=REDACTED&api_key=REDACTED"
    assert report["options"]["engine"] == report["engine"]["path"]
    assert report["engine"]["details"]["key_from"] == "OPENAI_API_KEY"
    html = next(text for name, text in files.items() if name.endswith("report.html"))
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    # the terminal shows the escapes, never performs them: no forged verdict line
    assert "\\x1b[2K verdict: pass" in proc.stdout
    assert not any(line.startswith("verdict: pass") for line in proc.stdout.splitlines())
    assert "verdict: fail" in proc.stdout


def test_a_server_refusing_the_key_at_load_is_one_clean_line(
    tmp_path: Path, hostile: StartHostile, four: Path, suites: Suites
) -> None:
    server = hostile(models_status=401)
    proc = suites(
        *_options(_address(server), four, "--report-dir", str(tmp_path)), env={"OPENAI_API_KEY": ENV_KEY}
    )
    assert proc.returncode == 4
    assert "answered HTTP 401" in proc.stderr and "Traceback" not in proc.stdout + proc.stderr
    _assert_clean({"stdout": proc.stdout, "stderr": proc.stderr})


def test_api_key_env_names_the_variable_and_only_its_name_is_recorded(
    tmp_path: Path, hostile: StartHostile, four: Path, suites: Suites
) -> None:
    server = hostile(completions_status=401)
    field = "plain-field-value"  # a field under a secret's name is one, whatever it looks like
    proc = suites(
        *_options(
            server.url,
            four,
            "--api-key-env",
            "GATEWAY_KEY",
            "--request-field",
            f"x_api_key={field}",
            "--report-dir",
            str(tmp_path),
        ),
        env={"GATEWAY_KEY": OTHER_KEY, "OPENAI_API_KEY": ENV_KEY},
    )
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert set(server.authorizations) == {f"Bearer {OTHER_KEY}"}  # the named one, not the default
    files = _files(tmp_path)
    _assert_clean({**files, "stdout": proc.stdout, "stderr": proc.stderr})
    report = json.loads(next(text for name, text in files.items() if name.endswith("report.json")))
    assert report["options"]["api_key_env"] == "GATEWAY_KEY"
    assert report["options"]["request_fields"] == {"x_api_key": "REDACTED"}
    assert not any(field in text for text in [*files.values(), proc.stdout, proc.stderr])
    assert report["engine"]["details"]["key_from"] == "GATEWAY_KEY"


def test_api_key_env_unset_or_given_the_key_is_one_line_that_never_shows_it(
    tmp_path: Path, hostile: StartHostile, four: Path, suites: Suites
) -> None:
    server = hostile()
    proc = suites(
        *_options(server.url, four, "--api-key-env", "NOT_SET_ANYWHERE_42", "--report-dir", str(tmp_path))
    )
    assert proc.returncode == 4
    [line] = [x for x in proc.stderr.splitlines() if x.strip()]
    assert (
        "--api-key-env NOT_SET_ANYWHERE_42: the environment variable NOT_SET_ANYWHERE_42 is not set" in line
    )
    assert server.authorizations == []  # refused before any request
    given_the_key = suites("--engine", server.url, "--api-key-env", OTHER_KEY, "--report-dir", str(tmp_path))
    assert given_the_key.returncode == 4
    assert "not the key itself" in given_the_key.stderr
    assert OTHER_KEY not in given_the_key.stdout + given_the_key.stderr


def test_escapes_from_a_server_and_a_dataset_are_shown_not_performed(
    tmp_path: Path, hostile: StartHostile, four: Path, suites: Suites
) -> None:
    """Class 7 alone: no key anywhere; the server's body and the dataset's ids carry escapes,
    a carriage return, a bidi override and markup."""
    rows = [json.loads(line) for line in four.read_text().splitlines()]
    data = tmp_path / "hostile-ids.jsonl"
    data.write_text(
        "".join(json.dumps({**r, "id": f"{r['id']}{FORGED}{BIDI}"}) + "\n" for r in rows), encoding="utf-8"
    )
    server = hostile(completions_status=500)
    reports = tmp_path / "reports"
    proc = suites(*_options(server.url, data, "--report-dir", str(reports), "-v"))
    assert proc.returncode == 1, proc.stdout[-3000:]
    files = _files(reports)
    html = next(text for name, text in files.items() if name.endswith("report.html"))
    for name, text in {**files, "stdout": proc.stdout, "stderr": proc.stderr}.items():
        if not name.endswith("generations.jsonl"):  # (none: every batch failed)
            assert "\x1b" not in text and "\r" not in text and BIDI not in text, name
    assert "<script>" not in html
    # the ids, as the failure names them, with their escapes shown
    assert "\\x1b[2K\\rverdict: pass\\u202e" in proc.stdout
    assert not any(line.lstrip().startswith("verdict: pass") for line in proc.stdout.splitlines())


# --- the same through `python -m harness run` --------------------------------------------------


def test_the_cli_prints_nothing_secret_and_no_escape(
    tmp_path: Path,
    hostile: StartHostile,
    four: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", ENV_KEY)
    server = hostile(completions_status=500, model=f"m{FORGED}{BIDI}")  # a hostile model id too
    code = cli.main(["run", *_options(_address(server), four, "--report-dir", str(tmp_path))])
    out, err = capsys.readouterr()
    assert code == 1, out + err
    assert set(server.authorizations) == {f"Bearer {ENV_KEY}"}
    _assert_clean({**_files(tmp_path), "stdout": out, "stderr": err})
    assert "\\x1b[2K verdict: pass" in out  # the cells' errors, shown
    files = _files(tmp_path)
    report = json.loads(next(text for name, text in files.items() if name.endswith("report.json")))
    assert report["engine"]["identity"] == "server:m\\x1b[2K\\rverdict: pass\\u202e"  # shown
    assert out.rstrip().splitlines()[-1].startswith("verdict: fail")

    refusing = hostile(models_status=401)
    code = cli.main(["run", *_options(_address(refusing), four, "--report-dir", str(tmp_path / "refused"))])
    out, err = capsys.readouterr()
    assert code == 2
    [line] = [x for x in err.splitlines() if x.strip()]
    assert line.startswith("error: --engine ") and "answered HTTP 401" in line
    _assert_clean({"stdout": out, "stderr": err})


# --- the gate itself -------------------------------------------------------------------------


def test_every_query_value_and_userinfo_is_a_secret() -> None:
    from harness.redact import redact, redact_url, remember_url

    url = "http://user:hunter22@h:1/v1?tenant=globex-corp&v=2&region=eu"
    assert redact_url(url) == "http://REDACTED@h:1/v1?tenant=REDACTED&v=REDACTED&region=REDACTED"
    remember_url(url)
    echoed = "no tenant globex-corp for user hunter22 at tenant=globex-corp (v=2) from " + url
    shown = redact(echoed)
    assert "globex-corp" not in shown and "hunter22" not in shown
    assert "tenant=REDACTED" in shown and "region=eu" not in shown
    assert "v=2" not in shown  # a remembered parameter, however short its value
    assert redact("Authorization: Bearer abc123def456ghi") == "Authorization: REDACTED"
    assert redact("key sk-proj-Ab12Cd34Ef56 refused") == "key REDACTED refused"
    assert redact("the Bearer tokens and task-force sk-learn") == "the Bearer tokens and task-force sk-learn"


def test_control_characters_are_shown_escaped_everywhere_a_string_goes() -> None:
    from harness.outside import clean, cleaned

    hostile = f"a{FORGED}\x9b31m\u2066b\u2069\x00\tc\nd"
    assert clean(hostile) == "a\\x1b[2K\\rverdict: pass\\x9b31m\\u2066b\\u2069\\x00\tc\nd"
    assert clean(clean(hostile)) == clean(hostile)  # once or twice, the same
    nested = {"k\x1b": (f"x{FORGED}", ["\u202e"]), 3: 1.5}
    assert cleaned(nested) == {"k\\x1b": ("x\\x1b[2K\\rverdict: pass", ["\\u202e"]), 3: 1.5}
    assert cleaned(nested) is not nested and cleaned({"a": "b"}) == {"a": "b"}


def test_goldens_keep_no_secret_and_still_match_their_run(tmp_path: Path) -> None:
    """Goldens are a file too: their texts and settings are stored redacted, and a run with the
    same settings still finds them (the settings are compared redacted the same way)."""
    from harness.config import DecodingSettings
    from harness.inputs.data import dataset_of
    from harness.model.dataset import Document
    from harness.redact import remember
    from harness.storage.goldens import GoldenSet, GoldensStore

    remember(OTHER_KEY)
    docs = (Document("d0", "a", "s0"), Document("d1", "b", "s1"))
    ds = dataset_of(docs, name="mine", path="mine.jsonl")
    settings = DecodingSettings(1, 8, request_fields=(("x_api_key", '"plain-field-value"'),))
    ident = "server:m"
    store = GoldensStore(tmp_path)
    path = store.write(
        GoldenSet(
            identity=ident,
            dataset_name=ds.info.name,
            dataset_hash=ds.info.hash,
            settings=settings.as_dict(),
            outputs={"d0": f"the key is {OTHER_KEY}", "d1": "y"},
            source={},
        ),
        1,
    )
    text = path.read_text(encoding="utf-8")
    assert OTHER_KEY not in text and "plain-field-value" not in text
    loaded = store.load(ident, ds, settings)
    assert loaded is not None and loaded.outputs == {"d0": "the key is REDACTED", "d1": "y"}
