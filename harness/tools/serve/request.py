"""What one /v1/completions request may ask of the served engine: the body parsed into prompts
and decoding settings, each value checked, within the engine's build limits (``Bounds``). A
request beyond them is a 400 naming the bound, found in the request's own thread before it
joins a batch with other clients' requests.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from harness.config import DecodingSettings
from harness.config.parse import Json
from harness.model.limits import EngineLimits

DEFAULT_MAX_BATCH = 8  # when the engine records no max_batch_size
DEFAULT_MAX_BEAMS = 8  # when the engine records no max_beam_width
DEFAULT_MAX_TOKENS = 4096  # when the engine records no max_seq_len
MAX_LENGTH_PENALTY = 10.0  # length ** penalty stays finite for any length an engine holds


class BadRequest(Exception):
    """A request the server cannot serve: answered 400 with the message."""


@dataclass(frozen=True)
class Bounds:
    """What one request may ask of the engine, from its build limits (defaults where it records
    none). A request beyond them is a 400 naming the bound; none can stall the engine thread.

    The beam width is bounded by the engine's KV slots in all (``max_batch_size`` x
    ``max_beam_width``), not by ``max_beam_width`` itself: serving an engine is how the harness
    tests it, and an engine that takes more beams than it was built for (the incident the
    harness exists to catch) must be served as it behaves; what a request may never do is ask
    for more sequences than the engine holds.
    """

    max_prompts: int = DEFAULT_MAX_BATCH  # prompts in one request (the server's batch size)
    max_beams: int = DEFAULT_MAX_BATCH * DEFAULT_MAX_BEAMS  # n / best_of of one request
    max_tokens: int = DEFAULT_MAX_TOKENS  # max_tokens of one request
    max_input_tokens: int | None = None  # checked by the engine thread where it can count
    max_seq_len: int | None = None

    def input_problem(self, tokens: int, max_tokens: int) -> str | None:
        """Why a prompt of ``tokens`` tokens cannot be served with ``max_tokens``, or None."""
        if tokens < 1:
            return "the prompt has no tokens: the engine needs at least one to continue from"
        if self.max_input_tokens is not None and tokens > self.max_input_tokens:
            return f"the prompt has {tokens} tokens; the engine's max_input_len is {self.max_input_tokens}"
        if self.max_seq_len is not None and tokens + max_tokens > self.max_seq_len:
            return (
                f"the prompt's {tokens} tokens + max_tokens {max_tokens} exceed the engine's "
                f"max_seq_len {self.max_seq_len}"
            )
        return None

    @classmethod
    def of(cls, limits: EngineLimits | None, max_batch_size: int) -> Bounds:
        if limits is None:  # an engine without build limits (an hf model, a user's class)
            return cls(
                max_prompts=max_batch_size,
                max_beams=max_batch_size * DEFAULT_MAX_BEAMS,
                max_tokens=DEFAULT_MAX_TOKENS,
                max_input_tokens=None,
                max_seq_len=None,
            )
        beams = limits.max_beam_width or DEFAULT_MAX_BEAMS
        return cls(
            max_prompts=max_batch_size,
            max_beams=(limits.max_batch_size or max_batch_size) * beams,
            max_tokens=limits.max_output_len or limits.max_seq_len or DEFAULT_MAX_TOKENS,
            max_input_tokens=limits.max_input_len,
            max_seq_len=limits.max_seq_len,
        )


def _integer(body: Mapping[str, Json], key: str, default: int | None, high: int, why: str) -> int | None:
    value = body.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadRequest(f"{key} must be a positive integer, got {value!r}")
    if value > high:
        raise BadRequest(f"{key} {value} is more than {high} ({why})")
    return value


def _prompts(body: Mapping[str, Json], bounds: Bounds) -> list[str]:
    prompt = body.get("prompt")
    given = [prompt] if isinstance(prompt, str) else prompt
    if not isinstance(given, list) or not given or not all(isinstance(p, str) for p in given):
        raise BadRequest("prompt must be a string or a non-empty list of strings")
    prompts = [p for p in given if isinstance(p, str)]  # every one of them, typed as str
    if len(prompts) > bounds.max_prompts:
        raise BadRequest(
            f"{len(prompts)} prompts in one request; at most {bounds.max_prompts} "
            "(the server's max batch size)"
        )
    if any(not p.strip() for p in prompts):
        raise BadRequest("prompt must not be empty: the engine needs at least one token to continue from")
    for i, p in enumerate(prompts):
        problem = _text_problem(p)
        if problem:
            where = "prompt" if isinstance(prompt, str) else f"prompt {i}"
            raise BadRequest(f"{where} {problem}")
    return prompts


def _text_problem(text: str) -> str | None:
    """Why ``text`` is not text an engine can encode, or None. JSON can carry what UTF-8
    cannot: a lone surrogate (an unpaired ``\\ud800`` escape), which every tokenizer refuses;
    found here, in the request's own thread, it never joins a batch with other clients'."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (
            f"is not valid text: a lone surrogate {ascii(text[exc.start])} at character "
            f"{exc.start} (a \\uD800-\\uDFFF escape must be one of a pair); send UTF-8 text"
        )
    return None


def _unsupported(body: Mapping[str, Json]) -> None:
    for key in ("stream", "echo"):
        if body.get(key) is True:
            raise BadRequest(f"{key} is not supported by this server")
    for key in ("suffix", "logprobs", "stop", "logit_bias"):
        if body.get(key):
            raise BadRequest(f"{key} is not supported by this server")
    temperature = body.get("temperature", 0)
    if temperature not in (0, 0.0, None) or isinstance(temperature, bool):
        raise BadRequest(
            f"temperature {temperature!r}: this server decodes greedily or with beam "
            "search only; send temperature 0"
        )


def _beam_settings(body: Mapping[str, Json], bounds: Bounds) -> tuple[int, int, float, bool]:
    """(beam width, choices per prompt, length penalty, early stopping)."""
    why = f"the engine's KV slots in all: max_batch_size x max_beam_width = {bounds.max_beams}"
    n = _integer(body, "n", 1, bounds.max_beams, why)
    best_of = _integer(body, "best_of", None, bounds.max_beams, why)
    assert n is not None
    beam_search = body.get("use_beam_search", False)
    if not isinstance(beam_search, bool):
        raise BadRequest("use_beam_search must be true or false")
    if beam_search:
        width = best_of or n  # trtllm-serve: best_of, else n; vLLM: n (clients send both equal)
        if n > width:
            raise BadRequest(f"n {n} is more than the beam width best_of {width}")
    elif n != 1 or best_of not in (None, 1):
        raise BadRequest("n or best_of above 1 needs use_beam_search true (greedy decoding gives one output)")
    else:
        width = 1
    penalty = body.get("length_penalty", 1.0)
    penalty = 1.0 if penalty is None else penalty
    if (
        isinstance(penalty, bool)
        or not isinstance(penalty, (int, float))
        or not -MAX_LENGTH_PENALTY <= penalty <= MAX_LENGTH_PENALTY
    ):
        raise BadRequest(
            f"length_penalty must be a number from -{MAX_LENGTH_PENALTY:g} to "
            f"{MAX_LENGTH_PENALTY:g}, got {penalty!r}"
        )
    early = body.get("early_stopping", True)
    early = True if early is None else early
    if not isinstance(early, bool):
        raise BadRequest(f"early_stopping must be true or false, got {early!r}")
    return width, n, float(penalty), early


def parse_completion(
    body: object, model_name: str, bounds: Bounds = Bounds()
) -> tuple[list[str], DecodingSettings, int]:
    """(prompts, settings, choices per prompt) from a /v1/completions body; BadRequest if not
    servable or beyond ``bounds``. A prompt list is served as consecutive slots."""
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    model = body.get("model")
    if model is not None and model != model_name:
        raise BadRequest(f"model {model!r} is not served here; GET /v1/models lists {model_name!r}")
    prompts = _prompts(body, bounds)
    _unsupported(body)
    max_tokens = _integer(
        body,
        "max_tokens",
        16,
        bounds.max_tokens,
        "the engine's max_seq_len" if bounds.max_seq_len else "this server's bound",
    )
    width, n, penalty, early = _beam_settings(body, bounds)
    assert max_tokens is not None
    settings = DecodingSettings(
        beam_width=width, max_new_tokens=max_tokens, length_penalty=penalty, early_stopping=early
    )
    return prompts, settings, n
