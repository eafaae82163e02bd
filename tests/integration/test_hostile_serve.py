"""Issue 24, class 8: one client's bad request must not fail the batch it would have shared
with other clients' (``python -m harness serve``).

A prompt with a lone surrogate ("\\ud800", legal in JSON, not in UTF-8) sent beside another
client's good prompt gave both a 500: the batch's token count raised, so the whole batch was
admitted, and the engine's tokenizer raised on the batch. Every per-request step (checking
the text, counting its tokens, encoding the answer) is now its own request's: that request
gets a 400 (or, for an output it cannot encode, a replacement character) and the others are
served as if it had never come.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from harness.config import DecodingSettings
from harness.engines.base import EngineInfo, Generates, Generation
from harness.tools.serve import CompletionServer, make_server
from tests.integration.common import EngineFactory
from tests.serving import post, serving

WINDOW_MS = 400  # long enough for two clients sent together to meet in one batch
Answer = tuple[int, dict[str, Any]]  # a response's status and its JSON body


def _server(engine: Generates) -> CompletionServer:
    return make_server(engine, model_name="m", max_batch_size=8, window_ms=WINDOW_MS)


def _post(srv: CompletionServer, body: dict[str, object]) -> Answer:
    """One request (json.dumps writes a lone surrogate as its \\ud800 escape, as a client does)."""
    return post(srv, json.dumps(body).encode("ascii"), timeout=120)


def _together(srv: CompletionServer, bodies: Sequence[dict[str, object]]) -> list[Answer | BaseException]:
    """The requests sent at once, each by a client of its own; their answers, in order."""
    answers: list[Answer | BaseException] = [RuntimeError("no answer")] * len(bodies)
    start = threading.Barrier(len(bodies))

    def client(i: int) -> None:
        start.wait()
        try:
            answers[i] = _post(srv, bodies[i])
        except Exception as exc:  # a dropped connection: no answer at all
            answers[i] = exc

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    return answers


def _answered(answers: list[Answer | BaseException]) -> list[Answer]:
    """The answers, every client having had one (no dropped connection)."""
    assert not any(isinstance(a, BaseException) for a in answers), answers
    return [a for a in answers if not isinstance(a, BaseException)]


def _served(engine: Generates, bodies: Sequence[dict[str, object]]) -> list[Answer | BaseException]:
    """The requests sent at once to a server of ``engine`` of their own, stopped after."""
    with serving(_server(engine)) as srv:
        return _together(srv, bodies)


@pytest.fixture
def emulator(engine_factory: EngineFactory) -> Iterator[CompletionServer]:
    from harness.engines.registry import load_engine

    with serving(_server(load_engine(str(engine_factory(8, 1))))) as srv:
        yield srv


def _good_prompt() -> str:
    """A prompt as a run sends it: the first bundled document in the default template."""
    from harness.config.basics import DEFAULT_PROMPT_TEMPLATE
    from harness.inputs.data import load_dataset

    return DEFAULT_PROMPT_TEMPLATE.format(text=load_dataset(None).documents[0].text)


def test_a_lone_surrogate_is_its_own_400_and_the_other_client_is_served(emulator: CompletionServer) -> None:
    bad: dict[str, object] = {"prompt": "Summarize: the council \ud800 met", "max_tokens": 8}
    good: dict[str, object] = {"prompt": _good_prompt(), "max_tokens": 8}
    [(bad_status, bad_body), (good_status, good_body)] = _answered(_together(emulator, [bad, good]))
    assert bad_status == 400, bad_body
    assert bad_body["error"]["message"] == (
        "prompt is not valid text: a lone surrogate '\\ud800' at character 23 (a \\uD800-\\uDFFF "
        "escape must be one of a pair); send UTF-8 text"
    )
    assert good_status == 200, good_body
    assert good_body["harness_batch"]["size"] == 1  # the bad request never joined its batch
    alone_status, alone = _post(emulator, good)  # its normal output: as when sent on its own
    assert alone_status == 200
    assert good_body["choices"][0]["text"] == alone["choices"][0]["text"]
    assert good_body["choices"][0]["text"].strip()


class Picky:
    """An engine whose tokenizer refuses a character that is valid text (as a tokenizer with
    no byte fallback refuses what its vocabulary lacks), in counting and in generating alike."""

    REFUSED = "\u2603"

    def __init__(self) -> None:
        self.info = EngineInfo(backend="picky-double", path="picky", identity="picky:1")
        self.batches: list[list[str]] = []

    def _ids(self, prompt: str) -> list[int]:
        """One token per word."""
        if self.REFUSED in prompt:
            raise ValueError(f"no token for {self.REFUSED!r}")
        return [len(word) for word in prompt.split()]

    def count_tokens(self, prompts: Sequence[str]) -> list[int]:
        return [len(self._ids(p)) for p in prompts]

    def generate(self, prompts: Sequence[str], settings: DecodingSettings) -> list[Generation]:
        self.batches.append(list(prompts))
        for p in prompts:
            self._ids(p)
        return [Generation(text=p.upper(), token_ids=(1,)) for p in prompts]


def test_a_prompt_the_tokenizer_cannot_read_is_its_own_400() -> None:
    engine = Picky()
    answers = _served(
        engine, [{"prompt": "a snowman \u2603 here"}, {"prompt": "plain words"}, {"prompt": "more words"}]
    )
    (bad_status, bad), (s1, one), (s2, two) = _answered(answers)
    assert bad_status == 400, bad
    assert bad["error"]["message"] == (
        "the engine's tokenizer cannot read the prompt (ValueError: no token for '\u2603')"
    )
    assert (s1, one["choices"][0]["text"]) == (200, "PLAIN WORDS")
    assert (s2, two["choices"][0]["text"]) == (200, "MORE WORDS")
    assert [sorted(b) for b in engine.batches] == [
        ["more words", "plain words"]
    ]  # one batch, not the bad one


class Undecodable:
    """An engine whose output for one prompt holds a lone surrogate (bytes its detokenizer
    could not decode, kept with surrogateescape)."""

    def __init__(self) -> None:
        self.info = EngineInfo(backend="undecodable-double", path="undecodable", identity="u:1")

    def generate(self, prompts: Sequence[str], settings: DecodingSettings) -> list[Generation]:
        return [
            Generation(text=("broken \udcff end" if "odd" in p else p.upper()), token_ids=(1,))
            for p in prompts
        ]


def test_an_output_that_cannot_be_encoded_is_answered_with_a_replacement() -> None:
    answers = _served(Undecodable(), [{"prompt": "odd one"}, {"prompt": "fine one"}])
    (odd_status, odd), (fine_status, fine) = _answered(answers)
    assert (odd_status, odd["choices"][0]["text"]) == (200, "broken ? end")
    assert (fine_status, fine["choices"][0]["text"]) == (200, "FINE ONE")
    assert odd["harness_batch"]["size"] == fine["harness_batch"]["size"] == 2


class NotText(Undecodable):
    """An engine whose output for one prompt is not text at all (bytes its backend forgot to
    decode)."""

    def generate(self, prompts: Sequence[str], settings: DecodingSettings) -> list[Generation]:
        texts: list[object] = [b"raw bytes" if "raw" in p else p.upper() for p in prompts]
        return [Generation(text=t, token_ids=(1,)) for t in texts]  # type: ignore[arg-type]  # not text, on purpose


def test_an_output_json_cannot_hold_is_its_own_500() -> None:
    answers = _served(NotText(), [{"prompt": "raw one"}, {"prompt": "fine one"}])
    (raw_status, raw), (fine_status, fine) = _answered(answers)
    assert raw_status == 500
    assert raw["error"]["message"] == (
        "the answer cannot be sent as JSON (TypeError: Object of type bytes is not JSON serializable)"
    )
    assert (fine_status, fine["choices"][0]["text"]) == (200, "FINE ONE")
