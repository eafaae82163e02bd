"""Secrets out of every string the harness shows or stores.

Two kinds of secret are redacted (each becomes ``REDACTED``):

- **known secrets**, values the harness was given: the API key read from the environment
  (``remember``, at engine load), and the parts of a server address that may be credentials
  (``remember_url``): the user and password of ``user:password@``, and the value of every
  query parameter (``?api_key=...``, ``?tenant=...``: a gateway decides what its parameters
  mean, so each value counts as a secret);
- **secret-looking text** wherever it appears: OpenAI-style keys (``sk-...``), ``Bearer ...``
  tokens, an ``Authorization:`` header, ``api_key=...``/``password: ...`` pairs (and the value
  of a field so named: ``redact_field``), and every http(s) address, shown as ``redact_url``
  shows it.

``redact_url`` gives an address as it may appear anywhere (user and password, every query
value and the fragment redacted; scheme, host, port, path and parameter names kept, so a
report still says which server was tested). ``redact`` applies every rule to free text: a
server's error body that echoes the request's key, a URL quoted in a message. It is the one
rule; ``harness.outside`` applies it where strings leave the process (report files, the
terminal, error messages, generations.jsonl and goldens).

Known values shorter than ``MIN_SECRET`` characters (and short all-digit query values such as
``?v=2``) are redacted in addresses but not in free text, where they would blot out ordinary
words and numbers.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Set as AbstractSet
from urllib.parse import parse_qsl, quote, unquote, urlsplit, urlunsplit

REDACTED = "REDACTED"
MIN_SECRET = 4  # characters of a key or password that free text is searched for
MIN_PARAMETER = 6  # characters of a query value that free text is searched for

_URL = re.compile(r"https?://[^\s\"'<>`\\]+", re.IGNORECASE)
_SK = re.compile(r"(?<![A-Za-z0-9_\-])sk-[A-Za-z0-9][A-Za-z0-9_\-]{6,}")
# a token: 8 or more characters with a digit, one of +/=_- or a capital after the first (so
# that prose such as "Bearer tokens" or "Authorization: required" stays)
_TOKEN = r"(?=[^\s,;\"'<>]{8})(?=[^\s,;\"'<>]*?[0-9+/=_\-]|[^\s,;\"'<>]+?[A-Z])[^\s,;\"'<>]+"
_BEARER = re.compile(r"\b([Bb]earer)(\s+)" + _TOKEN)
_AUTH_HEADER = re.compile(
    r"\b((?i:(?:proxy-)?authorization))(\s*[:=]\s*)"
    r"(?:(?i:bearer|basic|token)\s+)?" + _TOKEN
)
# names whose value is a secret: api_key, x-api-key, client_secret, db_password, access_token
# (bounded prefixes, and a match starts only where a name does: linear in the text's length)
_SECRET_NAME = (
    r"(?:[A-Za-z0-9]{1,32}[_\-]){0,3}(?:api[_\-]?key|apikey|secret|passw(?:or)?d|pwd|"
    r"(?:access|auth|refresh|session|bearer|id)[_\-]?token)"
)
_NAME = re.compile(_SECRET_NAME, re.IGNORECASE)
_PAIR = re.compile(
    r"(?<![A-Za-z0-9_\-])(" + _SECRET_NAME + r")(\"?\s*[:=]\s*\"?)([^\s\"'&,;<>]+)", re.IGNORECASE
)
_NUMBERISH = re.compile(r"[0-9.:\-+/ ]*")


class _Known:
    """The known secrets of this process and the query parameter names of remembered
    addresses, with the patterns that find them in free text (rebuilt when one is added)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.values: set[str] = set()
        self.names: set[str] = set()
        self.values_re: re.Pattern[str] | None = None
        self.names_re: re.Pattern[str] | None = None

    def add(self, values: AbstractSet[str], names: AbstractSet[str] = frozenset()) -> None:
        with self.lock:
            new_values = values - self.values
            new_names = names - self.names
            if new_values:
                self.values |= new_values
                forms = {f for v in self.values for f in (v, quote(v, safe=""))}
                self.values_re = re.compile(
                    "|".join(re.escape(f) for f in sorted(forms, key=len, reverse=True))
                )
            if new_names:
                self.names |= new_names
                self.names_re = re.compile(
                    r"(?<![A-Za-z0-9_.\-])("
                    + "|".join(re.escape(n) for n in sorted(self.names))
                    + r")=([^&\s\"'<>#]+)"
                )


_KNOWN = _Known()


def remember(secret: str | None) -> None:
    """A value the harness was given as a secret (an API key): redacted from every string
    from now on (values shorter than MIN_SECRET only where they are the whole of a part of an
    address, see the module docstring)."""
    if isinstance(secret, str) and len(secret.strip()) >= MIN_SECRET:
        _KNOWN.add({secret, secret.strip()})


def remember_url(url: str | None) -> None:
    """The credentials of a server address (user, password, every query value, and the query
    parameter names, so that ``name=value`` is redacted where a server echoes its query)."""
    if not isinstance(url, str) or not url.lower().startswith(("http://", "https://")):
        return
    try:
        parts = urlsplit(url)
        user, password = parts.username, parts.password
    except ValueError:
        return
    values = {unquote(v) for v in (user, password) if v and len(v) >= MIN_SECRET}
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    values |= {v for _, v in pairs if len(v) >= MIN_PARAMETER and not _NUMBERISH.fullmatch(v)}
    names = {k for k, v in pairs if k and v}
    if values or names:
        _KNOWN.add(values, names)


def _query(query: str) -> str:
    pairs = parse_qsl(query, keep_blank_values=True)
    return "&".join(f"{quote(k, safe='')}={REDACTED if v else ''}" for k, v in pairs)


def redact_url(url: str) -> str:
    """``url`` with the user and password, every query value and the fragment replaced by
    REDACTED; anything that is not an http(s) address comes back unchanged."""
    if not isinstance(url, str) or not url.lower().startswith(("http://", "https://")):
        return url
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:  # a bad port: keep the text, minus anything after '@' or '?'
        return re.sub(r"//[^/@]*@", f"//{REDACTED}@", url.split("?", 1)[0].split("#", 1)[0])
    netloc = f"[{host}]" if ":" in host else host
    if port is not None:
        netloc += f":{port}"
    if parts.username is not None or parts.password is not None:
        netloc = f"{REDACTED}@{netloc}"
    fragment = REDACTED if parts.fragment else ""
    return urlunsplit((parts.scheme, netloc, parts.path, _query(parts.query), fragment))


def secret_name(name: str) -> bool:
    """True for a field or parameter name whose value is a secret (``api_key``,
    ``X-Api-Key``, ``client_secret``, ``password``, ``access_token``; not ``api_key_env``,
    which names a variable)."""
    return bool(_NAME.fullmatch(name))


def redact_field(name: object, value: str) -> str:
    """A field's value as it may be shown: REDACTED whole under a secret's name (a
    ``--request-field api_key=...``, a server's ``"password"``), else ``redact(value)``."""
    if isinstance(name, str) and value and secret_name(name):
        return REDACTED
    return redact(value)


def redact(text: str) -> str:
    """``text`` with every known secret and every secret-looking part redacted (see the module
    docstring): addresses as ``redact_url`` shows them, then the known values, ``name=value``
    of a remembered address's query parameters, ``sk-`` keys, ``Bearer`` tokens,
    ``Authorization`` headers and ``api_key=``/``password:`` pairs."""
    if not text:
        return text
    if "://" in text:
        text = _URL.sub(lambda m: redact_url(m.group()), text)
    values_re, names_re = _KNOWN.values_re, _KNOWN.names_re
    if values_re is not None:
        text = values_re.sub(REDACTED, text)
    if names_re is not None and "=" in text:
        text = names_re.sub(lambda m: f"{m.group(1)}={REDACTED}", text)
    if "sk-" in text:
        text = _SK.sub(REDACTED, text)
    lowered = text.lower()
    if "bearer" in lowered:
        text = _BEARER.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    if "authorization" in lowered:
        text = _AUTH_HEADER.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    if ":" in text or "=" in text:
        text = _PAIR.sub(
            lambda m: m.group(0) if m.group(3) == REDACTED else f"{m.group(1)}{m.group(2)}{REDACTED}", text
        )
    return text
