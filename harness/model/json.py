"""JSON as a type: what ``json.loads`` gives and ``json.dumps`` takes. Values that enter from
outside (config.json, report.json, goldens, server answers) are this until checked."""

from __future__ import annotations

from typing_extensions import TypeAliasType

# recursive, and named so that pydantic builds a validator for it (report.json's free-form fields)
Json = TypeAliasType("Json", "None | bool | int | float | str | list[Json] | dict[str, Json]")
JsonObject = dict[str, Json]


def as_json(value: object) -> Json:
    """A model value (a dataclass of the model, or a container of them) as JSON, as report.json
    writes it."""
    from pydantic import TypeAdapter  # loaded with the model's types, which pydantic validates

    dumped: Json = TypeAdapter(type(value)).dump_python(value, mode="json")
    return dumped
