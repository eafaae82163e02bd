"""Prompt templates and --chat through a real transformers tokenizer (the bundled model's)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from harness.config import RunConfig
from harness.config.basics import DEFAULT_PROMPT_TEMPLATE
from harness.errors import ConfigError
from harness.inputs.prompts import build_prompts, chat_tokenizer, render_chat
from harness.model.dataset import Document

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

MODEL = Path(__file__).resolve().parents[3] / "harness" / "bundled" / "model"
CHAT = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}</|{{ m['role'] }}|>"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
DOCS = [
    Document("a", "The council met on Monday.", "Council met."),
    Document("b", "Rain closed the harbour.", "Harbour closed."),
]


@pytest.fixture
def tokenizer() -> PreTrainedTokenizerBase:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(MODEL))


def test_default_template_is_trtllms() -> None:
    assert DEFAULT_PROMPT_TEMPLATE == "{text} TL;DR: "
    assert build_prompts(DOCS, DEFAULT_PROMPT_TEMPLATE) == (
        "The council met on Monday. TL;DR: ",
        "Rain closed the harbour. TL;DR: ",
    )


def test_custom_template_keeps_other_braces() -> None:
    assert build_prompts(DOCS[:1], 'Article: {text}\n{"format": "one line"} Summary:') == (
        'Article: The council met on Monday.\n{"format": "one line"} Summary:',
    )


@pytest.mark.parametrize("template", ["Summarize:", "{txt} TL;DR", "{ text }", ""])
def test_template_without_text_is_a_clear_error(template: str) -> None:
    with pytest.raises(
        ConfigError, match=r"--prompt-template .*must contain \{text\}, where each document goes"
    ):
        RunConfig.from_options({"prompt_template": template})
    with pytest.raises(ConfigError, match=r"must contain \{text\}"):
        build_prompts(DOCS, template)


def test_chat_wraps_the_filled_template_as_the_user_turn(tokenizer: PreTrainedTokenizerBase) -> None:
    tokenizer.chat_template = CHAT
    prompts = build_prompts(DOCS, "Summarize: {text}", chat=True, tokenizer=tokenizer)
    # the bundled tokenizer does not add a BOS itself, so the template's <s> stays
    assert prompts[0] == "<s><|user|>Summarize: The council met on Monday.</|user|><|assistant|>"
    assert prompts[1].endswith("Rain closed the harbour.</|user|><|assistant|>")


def test_chat_drops_a_template_bos_when_the_tokenizer_adds_one(tokenizer: PreTrainedTokenizerBase) -> None:
    tokenizer.chat_template = CHAT
    assert render_chat(tokenizer, "hi", strip_bos=True) == "<|user|>hi</|user|><|assistant|>"
    assert render_chat(tokenizer, "hi", strip_bos=False) == "<s><|user|>hi</|user|><|assistant|>"


def test_chat_without_a_tokenizer_names_the_fix() -> None:
    with pytest.raises(
        ConfigError, match=r"--chat: .* exposes no transformers tokenizer .*--prompt-template"
    ):
        build_prompts(DOCS, "{text}", chat=True)


def test_chat_without_a_chat_template_names_the_fix(tokenizer: PreTrainedTokenizerBase) -> None:
    assert tokenizer.chat_template is None
    with pytest.raises(ConfigError, match=r"--chat: the tokenizer .* has no chat template"):
        chat_tokenizer(tokenizer)


def test_broken_chat_template_is_one_line(tokenizer: PreTrainedTokenizerBase) -> None:
    tokenizer.chat_template = "{% for m in messages %}{{ m.content | nosuchfilter }}{% endfor %}"
    with pytest.raises(ConfigError) as exc:
        build_prompts(DOCS, "{text}", chat=True, tokenizer=tokenizer)
    assert "chat template failed" in str(exc.value) and "\n" not in str(exc.value)


def test_chat_is_part_of_the_decoding_settings_only_when_on() -> None:
    off = RunConfig().decoding(1).as_dict()
    assert "chat" not in off  # goldens recorded before --chat keep matching
    assert RunConfig(chat=True).decoding(1).as_dict()["chat"] is True
