"""The ``/v1/completions`` wire format as the openai backend speaks it: the request it sends for
one prompt, and what it reads of each answer (choices, usage, ``harness_batch``, error text).

Decoding: ``temperature`` 0; a beam width W > 1 as ``use_beam_search: true, n: W, best_of: W,
length_penalty, early_stopping``; then the --request-field fields. trtllm-serve takes the beam
width from ``best_of`` (else ``n``) and rejects fields it does not know, so nothing else is
sent; vLLM takes it from ``n`` (its beam-search path ignores ``best_of``). Both answer with W
choices, the best first.

What an answer says of the server's prompt cache and slots (the in-flight path reads them):
the prompt tokens it served from cache as llama-server's ``timings.cache_n`` or OpenAI's (and
vLLM's, llama-server's too) ``usage.prompt_tokens_details.cached_tokens``; the slot it ran in as
llama-server's ``id_slot``, which its ``/v1/completions`` answers carry only inside
``__verbose``, a debugging field (verbose logging, or the request field ``verbose``, which
``--request-field verbose=true`` sends). llama-server's ``tokens_cached`` is not
read: it counts what the slot holds after the request, the generated tokens included.

An answer the harness cannot read fails its cell (``ServerError``) with the position and the
server's own words; ``python -m harness serve`` says where it put each request
(``harness_batch``), and a batch it split or reordered fails the cell too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from harness.config import DecodingSettings
from harness.config.parse import Json
from harness.engines.base import BatchError, FailureKind, Generation, said_count
from harness.engines.http_batch import Answer
from harness.redact import redact

BEAM_SEARCH_FIELDS = ("use_beam_search", "n", "best_of", "length_penalty", "early_stopping")
MESSAGE_CHARS = 300


class ServerError(BatchError):
    """The server did not answer a batch usefully: that cell fails, the run goes on."""


def request_body(model: str, prompt: str, settings: DecodingSettings) -> dict[str, Json]:
    """The request for one prompt: the harness's fields (only those trtllm-serve and vLLM
    know), then the --request-field ones."""
    body: dict[str, Json] = {
        "model": model,
        "prompt": prompt,
        "max_tokens": settings.max_new_tokens,
        "temperature": 0.0,
        "n": 1,
    }
    if settings.beam_width > 1:
        body.update(
            use_beam_search=True,
            n=settings.beam_width,
            best_of=settings.beam_width,
            length_penalty=settings.length_penalty,
            early_stopping=settings.early_stopping,
        )
    body.update(settings.extra_fields())
    return body


def server_message(body: bytes) -> str:
    """The error text of an answer: OpenAI's {"error": {"message"}}, vLLM's and trtllm-serve's
    {"message"}, FastAPI's {"detail"}, else the start of the body. Secrets are redacted before
    it is cut to MESSAGE_CHARS, so that no cut leaves a piece of a key that no longer matches
    (everything else about outside text is done where it leaves the process:
    ``harness.outside``)."""
    text = body.decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        inner = data.get("error")
        for candidate in (
            inner.get("message") if isinstance(inner, dict) else inner,
            data.get("message"),
            data.get("detail"),
        ):
            if candidate:
                text = str(candidate)
                break
    text = redact(" ".join(text.split()))
    return text[:MESSAGE_CHARS] + ("…" if len(text) > MESSAGE_CHARS else "") or "(empty body)"


def payload(answer: Answer, position: int, shown: str) -> dict[str, Json]:
    """The JSON object of an HTTP 200 answer; ServerError (refused, or not an object) else."""
    if answer.status != 200:
        raise ServerError(
            f"{shown}: HTTP {answer.status} at position {position}: {server_message(answer.body)}",
            FailureKind.REFUSED,
        )
    try:
        data = json.loads(answer.body)
    except (ValueError, RecursionError):
        data = None
    if not isinstance(data, dict):
        raise ServerError(
            f"{shown}: position {position}: the answer is not a JSON object ({server_message(answer.body)})",
            FailureKind.BAD_ANSWER,
        )
    return data


def generation(answer_payload: Mapping[str, Json], answer: Answer, position: int, shown: str) -> Generation:
    """One answer as a Generation: its choices' texts in ``index`` order (the first is scored),
    the first choice's token ids where the server gives them, and the answer's timing."""
    choices = _choices(answer_payload.get("choices"))
    if not choices:
        raise ServerError(
            f"{shown}: position {position}: the answer has no choices with "
            "text; is this a /v1/completions endpoint?",
            FailureKind.BAD_ANSWER,
        )
    ordered = sorted(enumerate(choices), key=lambda ic: (_index(ic[1][0], ic[0]), ic[0]))
    texts = tuple(text.strip() for _, (_, text) in ordered)
    ids = ordered[0][1][0].get("token_ids")
    ints = [t for t in ids if isinstance(t, int)] if isinstance(ids, list) else []
    return Generation(
        text=texts[0],
        token_ids=tuple(ints) if isinstance(ids, list) and len(ints) == len(ids) else (),
        beams=texts,
        timing=answer.timing(_completion_tokens(answer_payload, len(choices))),
    )


# where an answer says how many prompt tokens were served from cache, in the order read
CACHED_TOKEN_FIELDS = ("timings.cache_n", "usage.prompt_tokens_details.cached_tokens")


def cached_tokens(answer_payload: Mapping[str, Json]) -> tuple[int | None, tuple[str, ...]]:
    """The prompt tokens the server says it served from cache (from the first field of
    ``CACHED_TOKEN_FIELDS`` it gives), and every field that said it; (None, ()) where the
    answer does not say."""
    said: dict[str, int] = {}
    for field in CACHED_TOKEN_FIELDS:
        value: Json = dict(answer_payload)
        for key in field.split("."):
            value = value.get(key) if isinstance(value, dict) else None
        if (count := said_count(value)) is not None:
            said[field] = count
    return next(iter(said.values()), None), tuple(said)


def slot(answer_payload: Mapping[str, Json]) -> int | None:
    """The slot the server says the request ran in (llama-server's ``id_slot``, at the top of a
    native answer or in an OpenAI answer's ``__verbose``); None where it does not say."""
    verbose = answer_payload.get("__verbose")
    for where in (answer_payload, verbose if isinstance(verbose, dict) else {}):
        if (found := said_count(where.get("id_slot"))) is not None:
            return found
    return None


def reported_width(answer_payload: Mapping[str, Json]) -> int | None:
    """The beam width a server says it ran the request at (``python -m harness serve``)."""
    mark = answer_payload.get("harness_batch")
    width = mark.get("beam_width") if isinstance(mark, dict) else None
    return width if isinstance(width, int) and not isinstance(width, bool) else None


def check_slots(payloads: Sequence[Mapping[str, Json]], shown: str) -> None:
    """Where a server says how it batched (``python -m harness serve`` does), the batch must be
    exactly the planned one: one engine batch, slot i at position i; ServerError else."""
    marks = [m for p in payloads if isinstance(m := p.get("harness_batch"), dict)]
    if not marks or len(marks) != len(payloads):
        return
    ids = [m.get("id") for m in marks]
    positions = [m.get("position") for m in marks]
    if len(set(ids)) != 1 or positions != list(range(len(payloads))):
        raise ServerError(
            f"{shown}: the server did not keep the planned batch (engine "
            f"batches {ids}, positions {positions} for slots 0..{len(payloads) - 1});"
            " give `python -m harness serve` a longer --batch-window-ms",
            FailureKind.SPLIT_BATCH,
        )


def _choices(value: Json) -> list[tuple[dict[str, Json], str]]:
    """Each choice with its text; none unless ``value`` is a list of choices that all have one."""
    if not isinstance(value, list):
        return []
    found = []
    for choice in value:
        text = choice.get("text") if isinstance(choice, dict) else None
        if not isinstance(choice, dict) or not isinstance(text, str):
            return []
        found.append((choice, text))
    return found


def _index(choice: Mapping[str, Json], default: int) -> int:
    index = choice.get("index", default)
    return index if isinstance(index, int) and not isinstance(index, bool) else default


def _completion_tokens(answer_payload: Mapping[str, Json], choices: int) -> int | None:
    """Generated tokens per choice, from the answer's ``usage`` (None where it has none)."""
    usage = answer_payload.get("usage")
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        return None
    return tokens // max(choices, 1)
