"""The topics of the synthetic news: each draws a story (lead and body sentences, the facts
and the summary phrasings that restate them) from the vocabulary.

Phrasing syntax: ``[a|b|c]`` picks one alternative (uniformly, left to right, after the
facts are filled in; ``harness.bundled.synthetic.phrase``); within one group the
alternatives have the same number of ROUGE tokens and share no words, so swapping one for
another is quality-neutral in expectation.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

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
)


@dataclass(frozen=True)
class Story:
    """A topic's draw: lead and body sentences, summary phrasings and the facts they name."""

    lead: list[str]
    body: list[str]
    phrasings: tuple[str, ...]  # whole-sentence alternatives (e.g. clause orders)
    facts: dict[str, str]


def _person(rng: random.Random) -> str:
    return f"{rng.choice(FIRST)} {rng.choice(LAST)}"


def _numbers(**values: int) -> dict[str, str]:
    """``[digits|words]`` groups for small numbers, a number-format choice."""
    return {k: f"[{v}|{NUMBER_WORDS[v]}]" for k, v in values.items()}


def _election(rng: random.Random) -> Story:
    who, city, party, day = _person(rng), rng.choice(CITIES), rng.choice(PARTIES), rng.choice(DAYS)
    share = rng.randint(41, 78)
    rival = _person(rng)
    lead = [
        f"{who} of the {party} party won the race for mayor of {city} on {day} with {share} percent of the vote.",
        f"{who} defeated {rival} after a long and bitter campaign.",
    ]
    body = [
        f"Turnout in {city} was higher than at the last election.",
        f"{who} promised to focus on housing and transport in {city}.",
        f"{rival} conceded defeat late on {day} evening.",
        f"The {party} party had not held the office in {city} for many years.",
    ]
    won = (
        "{who} [of|from] the {party} party [won|took|claimed] [the {city} mayoral race|the mayoralty "
        "of {city}] [with|taking] {share} percent of the [vote|ballots]"
    )
    beat = "[defeating|beating|ousting] {rival}"
    return Story(
        lead,
        body,
        (f"{won}, {beat}.", f"{beat}, {won}."),
        {"who": who, "party": party, "city": city, "share": str(share), "rival": rival},
    )


def _earnings(rng: random.Random) -> Story:
    co, product, city = rng.choice(COMPANIES), rng.choice(PRODUCTS), rng.choice(CITIES)
    pct = rng.randint(3, 60)
    up = rng.random() < 0.5
    verb = "rose" if up else "fell"
    boss = _person(rng)
    lead = [
        f"The maker of {product}, {co}, said its profits {verb} by {pct} percent this year.",
        f"Chief executive {boss} spoke to investors at the company headquarters in {city}.",
    ]
    body = [
        f"{co} sells {product} in more than twenty countries.",
        f"{boss} said demand for {product} had changed quickly.",
        f"Shares in {co} moved sharply after the report.",
        f"The company employs thousands of people in {city}.",
    ]
    facts = {
        "co": co,
        "product": product,
        "city": city,
        "pct": str(pct),
        "boss": boss,
        "verb": "[rose|climbed|grew]" if up else "[fell|dropped|slipped]",
    }
    return Story(
        lead,
        body,
        (
            "{co}, the {product} maker based in {city}, said [profits|earnings] {verb} {pct} percent, "
            "[chief executive|company boss] {boss} [told|informed] investors.",
            "[chief executive|company boss] {boss} [told|informed] investors that [profits|earnings] "
            "at {co}, the {product} maker based in {city}, {verb} {pct} percent.",
        ),
        facts,
    )


def _storm(rng: random.Random) -> Story:
    kind, city, day = rng.choice(STORMS), rng.choice(CITIES), rng.choice(DAYS)
    homes = rng.randint(2, 95) * 100
    lead = [
        f"A severe {kind} hit {city} on {day}, leaving {homes} homes without power.",
        "Emergency crews worked through the night to clear roads.",
    ]
    body = [
        f"Schools in {city} stayed closed on {day} and the following day.",
        f"It was the worst {kind} the city had seen in twenty years.",
        "Forecasters said the weather would calm by the weekend.",
        f"Volunteers opened shelters for families affected by the {kind}.",
    ]
    return Story(
        lead,
        body,
        (
            "a [severe|fierce|violent] {kind} [struck|hit|battered] {city} on {day} and left {homes} homes without "
            "[power|electricity] as crews [cleared|reopened] roads.",
            "{homes} homes in {city} were left without [power|electricity] after a [severe|fierce|violent] {kind} "
            "[struck|hit|battered] on {day}, and crews [cleared|reopened] roads.",
        ),
        {"kind": kind, "city": city, "day": day, "homes": str(homes)},
    )


def _sport(rng: random.Random) -> Story:
    c1, c2 = rng.choice(CITIES), rng.choice(CITIES)
    t1, t2 = rng.choice(TEAMS), rng.choice(TEAMS)
    while (c1, t1) == (c2, t2):
        c2 = rng.choice(CITIES)
    g1, g2 = rng.randint(2, 6), rng.randint(0, 1)
    scorer, day = _person(rng), rng.choice(DAYS)
    lead = [
        f"{c1} {t1} beat {c2} {t2} {g1} to {g2} on {day}, with {scorer} scoring twice.",
        f"The win lifts {c1} {t1} to the top of the league.",
    ]
    body = [
        f"{scorer} opened the scoring early in the first half.",
        f"{c2} {t2} had won their previous four matches.",
        "More than ten thousand fans watched the game.",
        f"The coach of {c1} {t1} praised the team after the match.",
    ]
    facts = {
        "winner": f"{c1} {t1}",
        "loser": f"{c2} {t2}",
        "day": day,
        "scorer": scorer,
        "score": f"[{g1} to {g2}|{NUMBER_WORDS[g1]} to {NUMBER_WORDS[g2]}]",
    }
    return Story(
        lead,
        body,
        (
            "{winner} [beat|defeated|overcame] {loser} {score} on {day} as {scorer} [scored|netted|struck] twice to "
            "[lift|move|send] the [side|team|club] to [the top|first place].",
            "{scorer} [scored|netted|struck] twice as {winner} [beat|defeated|overcame] {loser} {score} on {day} to "
            "[lift|move|send] the [side|team|club] to [the top|first place].",
        ),
        facts,
    )


def _science(rng: random.Random) -> Story:
    field, finding, city = rng.choice(FIELDS), rng.choice(FINDINGS), rng.choice(CITIES)
    lead_author = _person(rng)
    years = rng.randint(2, 12)
    lead = [
        f"A team of {field} from the University of {city} has found {finding}.",
        f"The study, led by {lead_author}, took {years} years to complete.",
    ]
    body = [
        f"{lead_author} said the team was surprised by the result.",
        "The findings were published in a leading journal this week.",
        f"Other {field} said the work would need to be repeated.",
        f"The University of {city} plans a second expedition next year.",
    ]
    found = "[found|discovered|uncovered] {finding} [after|following] a {years} year [study|project]"
    return Story(
        lead,
        body,
        (
            "{field} [from|at] the University of {city}, [led|headed] by {author}, " + found + ".",
            "[led|headed] by {author}, {field} [from|at] the University of {city} " + found + ".",
        ),
        {"field": field, "finding": finding, "city": city, "author": lead_author, **_numbers(years=years)},
    )


def _build(rng: random.Random) -> Story:
    facility, city = rng.choice(FACILITIES), rng.choice(CITIES)
    cost = rng.randint(12, 900)
    year = rng.randint(2027, 2034)
    role = rng.choice(ROLES[:3])
    official = _person(rng)
    lead = [
        f"{city} will build a new {facility} costing {cost} million euros, {role} {official} announced.",
        f"Work is due to finish in {year}.",
    ]
    body = [
        f"The old {facility} in {city} was closed last year.",
        f"{official} said the project would create many local jobs.",
        f"Some residents worry about the cost of the {facility}.",
        "Construction firms will be invited to bid in the spring.",
    ]
    plan = (
        "{city} will [build|construct|open] a new {facility} [for|costing] {cost} million euros, "
        "[finishing|opening|ready] in {year}"
    )
    return Story(
        lead,
        body,
        (
            plan + ", {role} {official} [said|announced].",
            "{role} {official} [said|announced] that " + plan + ".",
        ),
        {
            "city": city,
            "facility": facility,
            "cost": str(cost),
            "year": str(year),
            "role": role,
            "official": official,
        },
    )


def _court(rng: random.Random) -> Story:
    who, crime, city = _person(rng), rng.choice(CRIMES), rng.choice(CITIES)
    years = rng.randint(2, 14)
    role = rng.choice(ROLES)
    lead = [
        f"A court in {city} sentenced former {role} {who} to {years} years in prison for {crime}.",
        f"The judge said the {crime} had gone on for a long time.",
    ]
    body = [
        f"{who} denied the charges throughout the trial.",
        f"Lawyers for {who} said they would appeal the ruling.",
        f"The case shocked many people in {city}.",
        f"Prosecutors had asked for a longer sentence for the {crime}.",
    ]
    term = "{years} years [in prison|behind bars] for {crime}"
    return Story(
        lead,
        body,
        (
            "former {role} {who} was [sentenced to|jailed for] " + term + " by a [court|judge] in {city}.",
            "a court in {city} [sentenced|condemned] former {role} {who} to " + term + ".",
        ),
        {"who": who, "crime": crime, "city": city, "role": role, **_numbers(years=years)},
    )


def _health(rng: random.Random) -> Story:
    illness, city = rng.choice(ILLNESSES), rng.choice(CITIES)
    cases = rng.randint(12, 480)
    doctor = _person(rng)
    lead = [
        f"Health officials in {city} reported {cases} new cases of {illness} this week.",
        f"Doctor {doctor} urged families to get vaccinated.",
    ]
    body = [
        f"Clinics in {city} will open longer hours to meet demand.",
        f"{doctor} said the rise in {illness} was worrying.",
        "Most patients were recovering at home.",
        f"The last outbreak of {illness} in {city} was several years ago.",
    ]
    urged = (
        "doctor {doctor} [urged|asked|told] [families|parents|residents] to [get vaccinated|seek vaccines]"
    )
    cases_ = "{city} reported {cases} [new|fresh] cases of {illness} this week"
    return Story(
        lead,
        body,
        (cases_ + " and " + urged + ".", urged + " after " + cases_ + "."),
        {"illness": illness, "city": city, "cases": str(cases), "doctor": doctor},
    )


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
