"""The options a backend reads when it loads an engine: one group, ``EngineOptions``, handed to
every backend class that takes ``options``; each option names the backends that read it."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import TypeVar

from harness.bounds import DAY_S, MAX_RETRIES, TOKEN_ID, Range
from harness.config.option import Parser, declared, option
from harness.config.parse import choice, env_name, non_negative_int, positive_real, reuse_setting
from harness.errors import ConfigError
from harness.model.vocab import Backend, CacheReuse, Dtype, Receiver, TrtllmRuntime

OPENAI_KEY_VARIABLE = "OPENAI_API_KEY"  # where a server's key is read from, as OpenAI's clients do
LOADERS = (Backend.TRTLLM, Backend.LLMAPI)  # the backends that load a tokenizer and special ids themselves


T = TypeVar("T")


def _loaded(
    default: T,
    flag: str,
    help: str,
    *,
    read_by: tuple[Backend, ...] = LOADERS,
    parse: Parser | None = None,
    bound: Range | None = None,
    metavar: str | None = None,
) -> T:
    """An option a backend reads as it loads the engine (by default, the trtllm and llmapi
    backends, which load a tokenizer and the special ids themselves)."""
    return option(
        default, flag, help, Receiver.ENGINE, parse=parse, bound=bound, metavar=metavar, read_by=read_by
    )


def _served(
    default: T, flag: str, help: str, *, parse: Parser | None = None, bound: Range | None = None, metavar: str
) -> T:
    """An option the openai backend reads: it applies only to an OpenAI-compatible server."""
    return option(default, flag, help, Receiver.SERVER, parse=parse, bound=bound, metavar=metavar)


def _token_id(flag: str, help: str) -> int | None:
    """A special token id, given where the tokenizer's is not the engine's."""
    return _loaded(None, flag, help, parse=non_negative_int, bound=TOKEN_ID, metavar="ID")


@dataclass(frozen=True)
class EngineOptions:
    """What a backend reads when it loads an engine (passed to classes that take ``options``)."""

    tokenizer: str | None = _loaded(
        None,
        "--tokenizer",
        "transformers tokenizer folder for the trtllm and llmapi backends (default: the engine or checkpoint "
        "folder, when it holds one)",
        metavar="DIR",
    )
    end_id: int | None = _token_id("--end-id", "end-of-sequence token id (default: the tokenizer's eos)")
    pad_id: int | None = _token_id(
        "--pad-id", "padding token id (default: the tokenizer's pad, else the end id)"
    )
    trtllm_runtime: TrtllmRuntime = _loaded(
        TrtllmRuntime.CPP,
        "--trtllm-runtime",
        "TensorRT-LLM runner of the trtllm backend: cpp (ModelRunnerCpp, default) or python (ModelRunner)",
        read_by=(Backend.TRTLLM,),
        parse=choice(TrtllmRuntime),
        metavar="{cpp,python}",
    )
    trust_remote_code: bool = _loaded(
        False,
        "--trust-remote-code",
        "let the tokenizer (and the LLM API) run code shipped with the model; off unless given",
    )
    dtype: Dtype = _loaded(
        Dtype.FLOAT32,
        "--dtype",
        "weights and compute dtype of the hf backend: float32 (default), bfloat16 or float16, as the model is "
        "served on GPUs (goldens are kept per dtype)",
        read_by=(Backend.HF,),
        parse=choice(Dtype),
        metavar="{float32,bfloat16,float16}",
    )
    kv_cache_reuse: CacheReuse = _loaded(
        CacheReuse.OFF,
        "--kv-cache-reuse",
        "KV-cache block reuse across requests for the trtllm and llmapi backends: off (default: every prompt's "
        "prefill is computed in its own batch, though the rotation sends it many times) or on (tests prefix-cache "
        "reuse on purpose); report.json engine.kv_cache_reuse records it, and unknown for a server",
        parse=reuse_setting,
        metavar="{off,on}",
    )
    model: str | None = _served(
        None,
        "--model",
        "model name sent to an OpenAI-compatible server (--engine http://HOST:PORT/v1; default: the first model "
        "of GET /v1/models)",
        metavar="NAME",
    )
    request_timeout: float = _served(
        600.0,
        "--request-timeout",
        "seconds to wait for a server's answer (--engine http://...; default {default})",
        parse=positive_real,
        bound=Range(None, DAY_S, "one day; an answer that takes longer is lost"),
        metavar="SECONDS",
    )
    retries: int = _served(
        2,
        "--retries",
        "times a server batch is resent after a connection error or an HTTP 5xx answer, with backoff; never "
        "after a 4xx (--engine http://...; default {default})",
        parse=non_negative_int,
        bound=Range(None, MAX_RETRIES, "each retry waits longer than the one before"),
        metavar="N",
    )
    api_key_env: str | None = _served(
        None,
        "--api-key-env",
        f"the environment variable that holds the key an OpenAI-compatible server wants (default "
        f"{OPENAI_KEY_VARIABLE}, used when set), sent as Authorization: Bearer; give the variable's NAME, never "
        "the key: the key is read when the engine loads and redacted from every report, file and terminal line "
        "(--engine http://...)",
        parse=env_name,
        metavar="NAME",
    )

    def __post_init__(self) -> None:
        # a notebook may give a vocabulary's word as a plain string: keep its type
        object.__setattr__(self, "trtllm_runtime", TrtllmRuntime(self.trtllm_runtime))
        object.__setattr__(self, "dtype", Dtype(self.dtype))
        try:
            object.__setattr__(
                self, "kv_cache_reuse", reuse_setting("--kv-cache-reuse", None)(str(self.kv_cache_reuse))
            )
        except argparse.ArgumentTypeError as exc:
            raise ConfigError(str(exc)) from None

    def server_kwargs(self) -> dict[str, object]:
        """The options a server backend reads, by name (a plug-in server class gets those its
        constructor takes)."""
        return {o.dest: getattr(self, o.dest) for o in declared(EngineOptions) if o.server}
