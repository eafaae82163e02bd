"""Credentials out of URLs before they are shown or stored.

A server address may carry a secret: ``http://h:8000/v1?api_key=sk-...`` (API gateways),
``user:password@host``, or a token in the fragment. ``redact_url`` gives the address as it may
appear in a report, a terminal line, an error message or a cache key; the backend keeps the
full address only to talk to the server. What counts as a secret (one rule for every place):

- the user and password part (``user:password@``) as a whole;
- the value of a query parameter whose name looks like a credential (``key``, ``token``,
  ``secret``, ``password``, ``auth``, ``signature``, ``credential``, ``session``, in any case
  and inside longer names such as ``api_key``, ``X-Amz-Signature``, ``access_token``);
- the value of any other query parameter that looks like a generated secret (16 or more
  characters with both letters and digits, e.g. ``?k=3f9a...``);
- the fragment, whatever it holds.

Each becomes ``REDACTED``; names, host, port and path stay, so the report still says which
server was tested.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, quote, urlsplit, urlunsplit

REDACTED = "REDACTED"
SECRET_NAME = re.compile(r"key|token|secret|passw|pwd|auth|signature|sig$|credential|session",
                         re.IGNORECASE)
SECRET_VALUE = re.compile(r"(?=.*[A-Za-z])(?=.*[0-9])[A-Za-z0-9_\-.~+/=]{16,}")


def _secret(name: str, value: str) -> bool:
    return bool(value) and (bool(SECRET_NAME.search(name)) or bool(SECRET_VALUE.fullmatch(value)))


def _query(query: str) -> str:
    pairs = parse_qsl(query, keep_blank_values=True)
    return "&".join(f"{quote(k, safe='')}={REDACTED if _secret(k, v) else quote(v, safe='')}"
                    for k, v in pairs)


def redact_url(url: str) -> str:
    """``url`` with every credential-looking part replaced by REDACTED (see the module
    docstring); anything that is not an http(s) address comes back unchanged."""
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


def redact_text(text: str, url: str) -> str:
    """``text`` with every occurrence of ``url`` (as given, or without its trailing slash)
    shown redacted: for messages that quote the address."""
    if not url or redact_url(url) == url:
        return text
    for form in sorted({url, url.rstrip("/")}, key=len, reverse=True):
        text = text.replace(form, redact_url(form))
    return text
