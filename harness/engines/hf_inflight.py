"""The hf backend's in-flight path: transformers' continuous batching.

One opening is one ``ContinuousBatchingManager`` (``model.init_continuous_batching``): its
generation loop runs in a background thread and every request sent joins the batch it is
decoding (paged KV cache, prefills split at ``max_batch_tokens``, FIFO scheduling). A single
collector thread reads the manager's output queue and hands each finished request to the
``Pending`` waiting for it, so ``result()`` may be called from any thread, in any order.

Continuous batching decodes greedy only: a beam width above 1 has no in-flight path here
(``HFEngine.in_flight`` says why); asked for ``num_beams=4`` it returns greedy outputs.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Protocol

from harness.config import DecodingSettings
from harness.engines.base import BatchError, Generation, InFlight, RequestTiming
from harness.engines.protocols import Tokenizer
from harness.model.vocab import FailureKind


class CbTokenizer(Tokenizer, Protocol):
    """The tokenizer as the in-flight path uses it: one prompt's ids, its special ids to drop."""

    all_special_ids: list[int]


# transformers' own page is 256 tokens: a prompt shorter than that would never share a
# prefix; 32 lets a warm second pass reuse all but the last page of a short prompt
PAGE_SIZE = 32
# on a CPU the cache is sized here (transformers sizes it from free accelerator memory,
# and on a CPU needs psutil to): 512 pages of 32 tokens, 2048 tokens per step at most
CPU_NUM_BLOCKS = 512
CPU_MAX_BATCH_TOKENS = 2048
POLL_S = 0.1  # how often the collector looks whether the manager's loop is still running


class CbOutput(Protocol):
    """One request's answer from the manager (transformers' ``GenerationOutput``)."""

    request_id: str
    generated_tokens: list[int]
    error: str | None
    created_time: float  # perf_counter when the request was added
    lifespan: tuple[float, float]  # perf_counter when it left the queue, and when it finished
    timestamps: list[float] | None  # perf_counter of each generated token (record_timestamps)

    def is_finished(self) -> bool: ...


class CbConfig(Protocol):
    """The manager's resolved ``ContinuousBatchingConfig``: what it says of its limits."""

    max_requests_per_batch: int | None
    max_batch_tokens: int | None
    page_size: int
    allow_block_sharing: bool


class CbManager(Protocol):
    """transformers' ``ContinuousBatchingManager``, as this path drives it."""

    continuous_batching_config: CbConfig

    def start(self) -> None: ...

    def stop(self, block: bool = ..., timeout: float | None = ..., *, hard_stop: bool = ...) -> None: ...

    def is_running(self) -> bool: ...

    def add_request(
        self,
        input_ids: list[int],
        request_id: str | None = ...,
        max_new_tokens: int | None = ...,
        *,
        record_timestamps: bool = ...,
        eos_token_id: int | list[int] | None = ...,
    ) -> str | None: ...

    def get_result(self, request_id: str | None = ..., timeout: float | None = ...) -> CbOutput | None: ...


class ContinuousBatching(Protocol):
    """A transformers model with continuous batching (``ContinuousMixin``)."""

    def init_continuous_batching(
        self, generation_config: object = ..., continuous_batching_config: object = ...
    ) -> CbManager: ...


class _Pending:
    """One request on its way: ``result()`` blocks until the collector hands its answer."""

    def __init__(self, future: Future[Generation]) -> None:
        self.future = future

    def result(self) -> Generation:
        return self.future.result()


class HfInFlight(InFlight):
    """One continuous-batching manager over an hf engine's model, greedy, for one setting.

    ``max_requests``: the most requests one step of the manager decodes (transformers'
    ``max_requests_per_batch``; None: its default); ``slots`` says the resolved figure."""

    def __init__(
        self,
        model: ContinuousBatching,
        tokenizer: CbTokenizer,
        settings: DecodingSettings,
        *,
        generation_config: object,
        on_cpu: bool,
        max_requests: int | None = None,
    ) -> None:
        import torch
        from transformers import ContinuousBatchingConfig, GenerationConfig

        if not isinstance(generation_config, GenerationConfig):
            raise TypeError(f"a GenerationConfig, not {type(generation_config).__name__}")
        self.tokenizer, self.settings = tokenizer, settings
        self.special = set(tokenizer.all_special_ids)
        self.eos = tokenizer.eos_token_id
        # the model's own generation config, as model.generate merges it, with generate's choices
        config = copy.deepcopy(generation_config)
        config.update(
            do_sample=False,
            num_beams=1,
            num_return_sequences=1,
            max_new_tokens=settings.max_new_tokens,
            eos_token_id=self.eos,
            pad_token_id=tokenizer.pad_token_id,
        )
        cb_config = ContinuousBatchingConfig(
            page_size=PAGE_SIZE,
            num_blocks=CPU_NUM_BLOCKS if on_cpu else None,
            max_batch_tokens=CPU_MAX_BATCH_TOKENS if on_cpu else None,
            max_requests_per_batch=max_requests,
        )
        self.manager = model.init_continuous_batching(
            generation_config=config, continuous_batching_config=cb_config
        )
        resolved = self.manager.continuous_batching_config
        limits = [n for n in (resolved.max_requests_per_batch, resolved.max_batch_tokens) if n is not None]
        self.slots = min(limits) if limits else None
        self.cache = (
            f"transformers' continuous batching shares whole {resolved.page_size}-token pages of a prompt's "
            "prefix already in its paged KV cache (prefix sharing, on where every layer is full attention); "
            "it recomputes at least the prompt's last token and does not say how many tokens a request reused"
            if resolved.allow_block_sharing
            else "transformers' continuous batching with block sharing off: every prompt is prefilled afresh"
        )
        self.futures: dict[str, Future[Generation]] = {}
        self.lock = threading.Lock()
        self.count = 0
        self.closed = threading.Event()
        self.opened = time.perf_counter()
        with torch.inference_mode():  # the manager's loop runs in the caller's inference mode
            self.manager.start()
        self.collector = threading.Thread(target=self._collect, name="hf-inflight-collector", daemon=True)
        self.collector.start()

    def submit(self, prompt: str) -> _Pending:
        ids = list(self.tokenizer([prompt])["input_ids"][0])  # as generate tokenizes one prompt
        future: Future[Generation] = Future()
        with self.lock:
            if self.closed.is_set():
                raise RuntimeError("the hf in-flight path is closed; open another with in_flight()")
            request_id = f"hf-{self.count}"
            self.count += 1
            self.futures[request_id] = future
        added = self.manager.add_request(
            ids,
            request_id=request_id,
            max_new_tokens=self.settings.max_new_tokens,
            record_timestamps=True,
            eos_token_id=self.eos,
        )
        if added is None:  # the manager stopped taking requests (its loop failed or stopped)
            self._fail(request_id, "transformers' continuous batching manager no longer takes requests")
        return _Pending(future)

    def close(self) -> None:
        """Stop the manager (requests still running fail) and the collector; idempotent."""
        with self.lock:
            if self.closed.is_set():
                return
            self.closed.set()
        self.manager.stop(block=True, hard_stop=True)
        self.collector.join()

    def _collect(self) -> None:
        """Hand every finished request to its future until the manager's loop has stopped."""
        while True:
            output = self.manager.get_result(timeout=POLL_S)
            if output is not None:
                self._deliver(output)
            elif not self.manager.is_running():
                break
        # the loop delivered its last answers before it stopped: read what is left
        while (output := self.manager.get_result(timeout=0)) is not None:
            self._deliver(output)
        with self.lock:
            left = list(self.futures)
        why = "closed" if self.closed.is_set() else "stopped"
        for request_id in left:
            self._fail(
                request_id, f"transformers' continuous batching loop {why} before this request finished"
            )

    def _deliver(self, output: CbOutput) -> None:
        if not output.is_finished():
            return
        if output.error is not None:
            self._fail(
                output.request_id, f"transformers' continuous batching failed the request: {output.error}"
            )
            return
        self._settle(output.request_id, lambda f: f.set_result(self._generation(output)))

    def _generation(self, output: CbOutput) -> Generation:
        """The answer as ``HFEngine.generate`` decodes it (special ids dropped, stripped)."""
        ids = [t for t in output.generated_tokens if t not in self.special]
        text = self.tokenizer.decode(ids, skip_special_tokens=True).strip()
        admitted, finished = output.lifespan
        stamps = output.timestamps or [finished]
        timing = RequestTiming(
            sent=output.created_time - self.opened,
            written=admitted - self.opened,  # joined the running batch
            first_byte=stamps[0] - self.opened,  # its first generated token
            finished=finished - self.opened,
            tokens=len(output.generated_tokens),
        )
        return Generation(text=text, token_ids=tuple(ids), beams=(text,), timing=timing)

    def _fail(self, request_id: str, message: str) -> None:
        error = BatchError(message, FailureKind.SERVER_ERROR)
        self._settle(request_id, lambda f: f.set_exception(error))

    def _settle(self, request_id: str, settle: Callable[[Future[Generation]], None]) -> None:
        with self.lock:
            future = self.futures.pop(request_id, None)
        if future is not None:
            settle(future)
