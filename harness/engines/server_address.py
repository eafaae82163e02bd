"""Where the openai backend sends its requests, and the key it sends with them.

The key a server wants is read from the environment when the engine loads: the variable named
by --api-key-env, else ``OPENAI_API_KEY`` when set (as OpenAI's clients do); it is sent as
``Authorization: Bearer KEY`` with every request. Only the variable's name is in the run's
options (report.json); the value is remembered as a secret (``harness.redact``), so it is
redacted wherever a string leaves the process, a server's error body that echoes it included
(``harness.outside``). A gateway that wants its key in the query string (``?api_key=...``)
gets it there: every query value is redacted the same way. ``user:password@`` is refused.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from urllib.parse import urlsplit

from harness.config import OPENAI_KEY_VARIABLE
from harness.errors import EngineError
from harness.redact import redact_url, remember


def api_key(variable: str | None, environ: Mapping[str, str] | None = None) -> tuple[str | None, str | None]:
    """(the key, the variable it came from): ``variable`` (--api-key-env), which must be set,
    else OPENAI_API_KEY when set, else no key. The key is remembered as a secret (redacted
    from every string from now on). EngineError naming the variable, never its value, when it
    is unset, empty or not a single header token."""
    env = os.environ if environ is None else environ
    name = variable or OPENAI_KEY_VARIABLE
    value = (env.get(name) or "").strip()
    if not value:
        if variable is None:
            return None, None
        state = "empty" if name in env else "not set"
        raise EngineError(
            f"--api-key-env {name}: the environment variable {name} is {state}; "
            f"export {name}=KEY before the run, or drop --api-key-env"
        )
    remember(value)
    if any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value):
        raise EngineError(
            f"${name}: the key holds a space or a control character, which cannot "
            "be sent in an Authorization header; set the variable to the key alone"
        )
    return value, name


def address(url: str) -> tuple[str, str, int, str, str]:
    """(scheme, host, port, base path, query) of a server address; EngineError if it is not
    one. Credentials in it are refused (the message shows the address redacted)."""
    shown = redact_url(url)
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise EngineError(f"--engine {shown}: not a server address; use http://HOST:PORT/v1")
    if parts.username or parts.password:
        raise EngineError(
            f"--engine {shown}: credentials in the address end up in shell "
            f"history and CI logs; remove them and export the key in "
            f"{OPENAI_KEY_VARIABLE} (or another variable named by --api-key-env), "
            "which is sent as Authorization: Bearer"
        )
    try:
        port = parts.port
    except ValueError:
        raise EngineError(f"--engine {shown}: bad port; use http://HOST:PORT/v1") from None
    return (
        parts.scheme,
        parts.hostname,
        port or (443 if parts.scheme == "https" else 80),
        parts.path.rstrip("/") or "/v1",
        parts.query,
    )
