"""The options a backend reads when it loads an engine: one group, ``EngineOptions``, handed to
every backend class that takes ``options``; each option names the backends that read it."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from harness.bounds import DAY_S, MAX_RETRIES, TOKEN_ID, Range
from harness.config.option import declared, option
from harness.config.parse import choice, env_name, non_negative_int, positive_real, reuse_setting
from harness.errors import ConfigError
from harness.model.vocab import Backend, CacheReuse, Dtype, Receiver, TrtllmRuntime

OPENAI_KEY_VARIABLE = "OPENAI_API_KEY"  # where a server's key is read from, as OpenAI's clients do
LOADERS = (Backend.TRTLLM, Backend.LLMAPI)  # the backends that load a tokenizer and special ids themselves


@dataclass(frozen=True)
class EngineOptions:
    """What a backend reads when it loads an engine (passed to classes that take ``options``)."""

    tokenizer: str | None = option(
        None,
        "--tokenizer",
        "transformers tokenizer folder for the trtllm and llmapi backends (default: the engine or checkpoint "
        "folder, when it holds one)",
        Receiver.ENGINE,
        metavar="DIR",
        read_by=LOADERS,
    )
    end_id: int | None = option(
        None,
        "--end-id",
        "end-of-sequence token id (default: the tokenizer's eos)",
        Receiver.ENGINE,
        parse=non_negative_int,
        bound=TOKEN_ID,
        metavar="ID",
        read_by=LOADERS,
    )
    pad_id: int | None = option(
        None,
        "--pad-id",
        "padding token id (default: the tokenizer's pad, else the end id)",
        Receiver.ENGINE,
        parse=non_negative_int,
        bound=TOKEN_ID,
        metavar="ID",
        read_by=LOADERS,
    )
    trtllm_runtime: TrtllmRuntime = option(
        TrtllmRuntime.CPP,
        "--trtllm-runtime",
        "TensorRT-LLM runner of the trtllm backend: cpp (ModelRunnerCpp, default) or python (ModelRunner)",
        Receiver.ENGINE,
        parse=choice(TrtllmRuntime),
        metavar="{cpp,python}",
        read_by=(Backend.TRTLLM,),
    )
    trust_remote_code: bool = option(
        False,
        "--trust-remote-code",
        "let the tokenizer (and the LLM API) run code shipped with the model; off unless given",
        Receiver.ENGINE,
        read_by=LOADERS,
    )
    dtype: Dtype = option(
        Dtype.FLOAT32,
        "--dtype",
        "weights and compute dtype of the hf backend: float32 (default), bfloat16 or float16, as the model is "
        "served on GPUs (goldens are kept per dtype)",
        Receiver.ENGINE,
        parse=choice(Dtype),
        metavar="{float32,bfloat16,float16}",
        read_by=(Backend.HF,),
    )
    kv_cache_reuse: CacheReuse = option(
        CacheReuse.OFF,
        "--kv-cache-reuse",
        "KV-cache block reuse across requests for the trtllm and llmapi backends: off (default: every prompt's "
        "prefill is computed in its own batch, though the rotation sends it many times) or on (tests prefix-cache "
        "reuse on purpose); report.json engine.kv_cache_reuse records it, and unknown for a server",
        Receiver.ENGINE,
        parse=reuse_setting,
        metavar="{off,on}",
        read_by=LOADERS,
    )
    model: str | None = option(
        None,
        "--model",
        "model name sent to an OpenAI-compatible server (--engine http://HOST:PORT/v1; default: the first model "
        "of GET /v1/models)",
        Receiver.SERVER,
        metavar="NAME",
        read_by=(Backend.OPENAI,),
        server=True,
    )
    request_timeout: float = option(
        600.0,
        "--request-timeout",
        "seconds to wait for a server's answer (--engine http://...; default {default})",
        Receiver.SERVER,
        parse=positive_real,
        bound=Range(None, DAY_S, "one day; an answer that takes longer is lost"),
        metavar="SECONDS",
        read_by=(Backend.OPENAI,),
        server=True,
    )
    retries: int = option(
        2,
        "--retries",
        "times a server batch is resent after a connection error or an HTTP 5xx answer, with backoff; never "
        "after a 4xx (--engine http://...; default {default})",
        Receiver.SERVER,
        parse=non_negative_int,
        bound=Range(None, MAX_RETRIES, "each retry waits longer than the one before"),
        metavar="N",
        read_by=(Backend.OPENAI,),
        server=True,
    )
    api_key_env: str | None = option(
        None,
        "--api-key-env",
        f"the environment variable that holds the key an OpenAI-compatible server wants (default "
        f"{OPENAI_KEY_VARIABLE}, used when set), sent as Authorization: Bearer; give the variable's NAME, never "
        "the key: the key is read when the engine loads and redacted from every report, file and terminal line "
        "(--engine http://...)",
        Receiver.SERVER,
        parse=env_name,
        metavar="NAME",
        read_by=(Backend.OPENAI,),
        server=True,
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
