"""The words the synthetic news stories are drawn from: names, places, teams, companies,
products and the other slots a topic fills, the filler sentences that pad a document, and
number words for the summaries' digits-or-words choice.

The words are data, ``vocabulary.json`` beside this module; each list keeps its order, since
a seeded draw picks by position.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_data(name: str) -> Any:
    """A JSON data file of this package (the package data that installs carry)."""
    return json.loads(Path(__file__).with_name(name).read_text(encoding="utf-8"))


_WORDS: dict[str, list[str]] = read_data("vocabulary.json")

FIRST = _WORDS["first"]
LAST = _WORDS["last"]
CITIES = _WORDS["cities"]
DAYS = _WORDS["days"]
TEAMS = _WORDS["teams"]
COMPANIES = _WORDS["companies"]
PRODUCTS = _WORDS["products"]
FACILITIES = _WORDS["facilities"]
ILLNESSES = _WORDS["illnesses"]
STORMS = _WORDS["storms"]
FIELDS = _WORDS["fields"]
FINDINGS = _WORDS["findings"]
PARTIES = _WORDS["parties"]
ROLES = _WORDS["roles"]
CRIMES = _WORDS["crimes"]
FILLER = _WORDS["filler"]
NUMBER_WORDS = _WORDS["number_words"]
