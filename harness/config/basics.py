"""What the options share: the default grid and prompt template, where the harness keeps its
cache, and what names a server."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

DEFAULT_BATCH_SIZES = (1, 2, 4, 8)
DEFAULT_BEAM_WIDTHS = (1, 2, 4)
DEFAULT_PROMPT_TEMPLATE = "{text} TL;DR: "
BUNDLED = "bundled"
CACHE_FOLDER = "batch-position-harness"  # under the user's cache directory
GENERATIONS_FOLDER = "generations"


def harness_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The harness's folder in the user's cache: $XDG_CACHE_HOME (else ~/.cache) /
    batch-position-harness. An empty XDG_CACHE_HOME counts as unset, as the XDG spec says."""
    env = os.environ if environ is None else environ
    return Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / CACHE_FOLDER


def generations_folder() -> Path:
    """The generation cache's default folder."""
    return harness_cache_dir() / GENERATIONS_FOLDER


def is_url(spec: str) -> bool:
    """True for an OpenAI-compatible server address (http:// or https://)."""
    return spec.lower().startswith(("http://", "https://"))
