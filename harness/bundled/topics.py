"""The topics of the synthetic news: each draws a story (lead and body sentences, the facts
and the summary phrasings that restate them) from the vocabulary.

The texts are data, ``topics.json`` beside this module: for each topic its lead and body
sentences and its summary phrasings, ``str.format`` templates over the topic's named values.
What stays here is code: each topic's draws from the random stream and the values made from
them. The order and the calls of the draws fix what a seed gives: changing them changes
``news.jsonl`` and the bundled model's training data.

Phrasing syntax: ``[a|b|c]`` picks one alternative (uniformly, left to right, after the
facts are filled in; ``harness.bundled.synthetic.phrase``); within one group the
alternatives have the same number of ROUGE tokens and share no words, so swapping one for
another is quality-neutral in expectation.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypedDict

from harness.bundled.vocabulary import (
    CITIES,
    COMPANIES,
    CRIMES,
    DAYS,
    FACILITIES,
    FIELDS,
    FINDINGS,
    FIRST,
    ILLNESSES,
    LAST,
    NUMBER_WORDS,
    PARTIES,
    PRODUCTS,
    ROLES,
    STORMS,
    TEAMS,
    read_data,
)


@dataclass(frozen=True)
class Story:
    """A topic's draw: lead and body sentences, summary phrasings and the facts they name."""

    lead: list[str]
    body: list[str]
    phrasings: tuple[str, ...]  # whole-sentence alternatives (e.g. clause orders)
    facts: dict[str, str]


class _Templates(TypedDict):
    lead: list[str]
    body: list[str]
    phrasings: list[str]


_TEMPLATES: dict[str, _Templates] = read_data("topics.json")


def _story(topic: str, facts: Mapping[str, object], **plain: object) -> Story:
    """``topic``'s story: its sentences filled in with ``facts`` and ``plain`` (``plain`` wins,
    a value as the document states it where the summaries word it their own way, e.g. a number
    in digits or words); its phrasings left with their fields, which ``phrase`` fills in with
    ``facts``."""
    values = {**facts, **plain}
    texts = _TEMPLATES[topic]
    return Story(
        [s.format(**values) for s in texts["lead"]],
        [s.format(**values) for s in texts["body"]],
        tuple(texts["phrasings"]),
        {k: str(v) for k, v in facts.items()},
    )


def _person(rng: random.Random) -> str:
    return f"{rng.choice(FIRST)} {rng.choice(LAST)}"


def _numbers(**values: int) -> dict[str, str]:
    """``[digits|words]`` groups for small numbers, a number-format choice."""
    return {k: f"[{v}|{NUMBER_WORDS[v]}]" for k, v in values.items()}


def _election(rng: random.Random) -> Story:
    who, city, party, day = _person(rng), rng.choice(CITIES), rng.choice(PARTIES), rng.choice(DAYS)
    share = rng.randint(41, 78)
    rival = _person(rng)
    facts = dict(who=who, party=party, city=city, share=share, rival=rival)
    return _story("election", facts, day=day)


def _earnings(rng: random.Random) -> Story:
    co, product, city = rng.choice(COMPANIES), rng.choice(PRODUCTS), rng.choice(CITIES)
    pct = rng.randint(3, 60)
    up = rng.random() < 0.5
    boss = _person(rng)
    verb = "[rose|climbed|grew]" if up else "[fell|dropped|slipped]"
    facts = dict(co=co, product=product, city=city, pct=pct, boss=boss, verb=verb)
    return _story("business", facts, verb="rose" if up else "fell")


def _storm(rng: random.Random) -> Story:
    kind, city, day = rng.choice(STORMS), rng.choice(CITIES), rng.choice(DAYS)
    homes = rng.randint(2, 95) * 100
    return _story("weather", dict(kind=kind, city=city, day=day, homes=homes))


def _sport(rng: random.Random) -> Story:
    c1, c2 = rng.choice(CITIES), rng.choice(CITIES)
    t1, t2 = rng.choice(TEAMS), rng.choice(TEAMS)
    while (c1, t1) == (c2, t2):
        c2 = rng.choice(CITIES)
    g1, g2 = rng.randint(2, 6), rng.randint(0, 1)
    scorer, day = _person(rng), rng.choice(DAYS)
    score = f"[{g1} to {g2}|{NUMBER_WORDS[g1]} to {NUMBER_WORDS[g2]}]"
    facts = dict(winner=f"{c1} {t1}", loser=f"{c2} {t2}", day=day, scorer=scorer, score=score)
    return _story("sport", facts, g1=g1, g2=g2)


def _science(rng: random.Random) -> Story:
    field, finding, city = rng.choice(FIELDS), rng.choice(FINDINGS), rng.choice(CITIES)
    author = _person(rng)
    years = rng.randint(2, 12)
    facts = dict(field=field, finding=finding, city=city, author=author, **_numbers(years=years))
    return _story("science", facts, years=years)


def _build(rng: random.Random) -> Story:
    facility, city = rng.choice(FACILITIES), rng.choice(CITIES)
    cost = rng.randint(12, 900)
    year = rng.randint(2027, 2034)
    role = rng.choice(ROLES[:3])  # the office holders who announce public works
    official = _person(rng)
    facts = dict(city=city, facility=facility, cost=cost, year=year, role=role, official=official)
    return _story("infrastructure", facts)


def _court(rng: random.Random) -> Story:
    who, crime, city = _person(rng), rng.choice(CRIMES), rng.choice(CITIES)
    years = rng.randint(2, 14)
    role = rng.choice(ROLES)
    facts = dict(who=who, crime=crime, city=city, role=role, **_numbers(years=years))
    return _story("court", facts, years=years)


def _health(rng: random.Random) -> Story:
    illness, city = rng.choice(ILLNESSES), rng.choice(CITIES)
    cases = rng.randint(12, 480)
    doctor = _person(rng)
    return _story("health", dict(illness=illness, city=city, cases=cases, doctor=doctor))


TOPICS = {
    "election": _election,
    "business": _earnings,
    "weather": _storm,
    "sport": _sport,
    "science": _science,
    "infrastructure": _build,
    "court": _court,
    "health": _health,
}
