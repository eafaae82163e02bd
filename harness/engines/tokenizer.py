"""The transformers tokenizer and special token ids of an engine that does not carry its own.

TensorRT-LLM engine directories usually hold no tokenizer: it comes from ``--tokenizer DIR``
or, when present, the engine (or checkpoint) folder itself. Only local folders are read,
never the model hub, and model code runs only with ``--trust-remote-code``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from harness.config import EngineOptions
from harness.engines.protocols import Tokenizer
from harness.errors import EngineError, describe

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")


@dataclass(frozen=True)
class LoadedTokenizer:
    """A tokenizer with the ids the runner needs to end and pad sequences."""

    tokenizer: Tokenizer
    folder: Path
    end_id: int
    pad_id: int


def has_tokenizer(folder: Path) -> bool:
    return any((folder / name).is_file() for name in TOKENIZER_FILES)


def tokenizer_folder(model_dir: Path, options: EngineOptions, *, backend: str) -> Path:
    """--tokenizer, else the model folder when it holds a tokenizer; EngineError otherwise."""
    if options.tokenizer:
        folder = Path(options.tokenizer).expanduser()
        if not folder.is_dir():
            raise EngineError(
                f"--tokenizer {options.tokenizer}: not a folder; give the folder of "
                "the model's transformers tokenizer (tokenizer.json, tokenizer_config.json)"
            )
        if not has_tokenizer(folder):
            raise EngineError(
                f"--tokenizer {options.tokenizer}: holds none of "
                f"{', '.join(TOKENIZER_FILES)}; give the model's tokenizer folder"
            )
        return folder
    if has_tokenizer(model_dir):
        return model_dir
    raise EngineError(
        f"{model_dir}: no tokenizer in the folder; the {backend} backend needs the "
        "model's tokenizer: pass --tokenizer DIR (e.g. the Hugging Face checkpoint "
        "the engine was built from)"
    )


def auto_tokenizer(folder: Path, options: EngineOptions) -> Tokenizer:
    """``AutoTokenizer.from_pretrained`` on a local folder, running the model's own code only
    with --trust-remote-code; its own exceptions propagate (each caller names the fix)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder), trust_remote_code=options.trust_remote_code)
    # transformers annotates decode for a batch of id lists too (str | list[str]); the backends
    # decode one id list at a time, which is one str
    return cast(Tokenizer, tokenizer)


def count_tokens(tokenizer: Tokenizer, prompts: Sequence[str]) -> list[int]:
    """Each prompt's length in tokens, as the engine encodes it."""
    return [len(ids) for ids in tokenizer(list(prompts))["input_ids"]]


def open_tokenizer(folder: Path, options: EngineOptions) -> Tokenizer:
    """The transformers tokenizer in ``folder`` (local files only; its own code only with
    --trust-remote-code); EngineError naming the folder otherwise."""
    try:
        return auto_tokenizer(folder, options)
    except Exception as exc:  # transformers raises OSError, ValueError, ImportError, ...
        hint = (
            "; if it ships its own code, add --trust-remote-code"
            if not options.trust_remote_code and "trust_remote_code" in str(exc)
            else ""
        )
        raise EngineError(f"{folder}: cannot load the tokenizer ({describe(exc)}){hint}") from None


def load_tokenizer(model_dir: Path, options: EngineOptions, *, backend: str) -> LoadedTokenizer:
    """The tokenizer and end/pad ids (--end-id/--pad-id, else eos and pad, else pad = end)."""
    folder = tokenizer_folder(model_dir, options, backend=backend)
    tokenizer = open_tokenizer(folder, options)
    end_id = options.end_id if options.end_id is not None else tokenizer.eos_token_id
    if end_id is None:
        raise EngineError(f"{folder}: the tokenizer has no eos token; pass --end-id ID")
    pad_id = options.pad_id if options.pad_id is not None else tokenizer.pad_token_id
    return LoadedTokenizer(
        tokenizer=tokenizer,
        folder=folder,
        end_id=int(end_id),
        pad_id=int(pad_id if pad_id is not None else end_id),
    )
