"""Prompts from documents: the template (TensorRT-LLM's ``"{text} TL;DR: "`` by default) and,
with ``--chat``, the engine tokenizer's chat template around it.

With ``--chat`` the filled-in template is the user message and the tokenizer's chat template
renders the conversation with the generation prompt (``add_generation_prompt=True``). The
engine tokenizes the rendered text again, so a BOS token the template writes as text is
dropped when the tokenizer adds one itself (otherwise the prompt would start with two).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

from harness.config import check_template
from harness.errors import ConfigError, describe
from harness.inputs.data import build_prompt
from harness.model.dataset import Document


@runtime_checkable
class ChatTokenizer(Protocol):
    """What ``--chat`` uses of a transformers tokenizer."""

    chat_template: object
    bos_token: object
    bos_token_id: object

    def __call__(self, text: str) -> Mapping[str, Sequence[int]]: ...

    def apply_chat_template(
        self, conversation: list[dict[str, str]], *, tokenize: bool, add_generation_prompt: bool
    ) -> object: ...


def chat_tokenizer(tokenizer: object, label: str = "engine") -> ChatTokenizer:
    """The engine's tokenizer, when it has a chat template; a ConfigError naming the fix
    (``label`` names the engine: "hf engine models/x")."""
    if not isinstance(tokenizer, ChatTokenizer) or not callable(
        getattr(tokenizer, "apply_chat_template", None)
    ):
        raise ConfigError(
            f"--chat: the {label} exposes no transformers tokenizer (a `tokenizer` "
            "attribute) to take a chat template from; drop --chat and write the "
            "model's prompt format into --prompt-template"
        )
    if not getattr(tokenizer, "chat_template", None):
        raise ConfigError(
            f"--chat: the tokenizer of the {label} has no chat template "
            "(chat_template in tokenizer_config.json); drop --chat and write the "
            "prompt format into --prompt-template"
        )
    return tokenizer


def _adds_bos(tokenizer: ChatTokenizer) -> bool:
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is None:
        return False
    ids = tokenizer("x")["input_ids"]
    return bool(ids) and ids[0] == bos


def render_chat(tokenizer: ChatTokenizer, user_message: str, *, strip_bos: bool | None = None) -> str:
    """One user turn through the chat template, ready for the assistant's answer; a BOS the
    template writes is dropped when the tokenizer adds its own (``strip_bos`` None: ask it)."""
    try:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": user_message}], tokenize=False, add_generation_prompt=True
        )
    except Exception as exc:  # jinja2 errors from a template the user's model ships
        raise ConfigError(
            f"--chat: the tokenizer's chat template failed: {describe(exc)}; drop "
            "--chat and use --prompt-template"
        ) from None
    if not isinstance(text, str):
        raise ConfigError(
            f"--chat: the tokenizer's chat template gave {type(text).__name__}, not "
            "text; drop --chat and use --prompt-template"
        )
    bos = getattr(tokenizer, "bos_token", None)
    if strip_bos is None:
        strip_bos = _adds_bos(tokenizer)
    if bos and strip_bos and text.startswith(bos):
        text = text[len(bos) :]
    return text


def build_prompts(
    documents: Sequence[Document],
    template: str,
    *,
    chat: bool = False,
    tokenizer: object = None,
    label: str = "engine",
) -> tuple[str, ...]:
    """Every document's prompt, in dataset order; with ``chat`` through the chat template of
    ``tokenizer``, the engine's (``label`` names the engine in an error)."""
    check_template(template)
    plain = [build_prompt(template, d) for d in documents]
    if not chat:
        return tuple(plain)
    tokenizer = chat_tokenizer(tokenizer, label)
    strip = _adds_bos(tokenizer)
    return tuple(render_chat(tokenizer, p, strip_bos=strip) for p in plain)
