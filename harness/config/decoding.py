"""How every request is decoded: one ``DecodingSettings`` per beam width, made by the run's
config, sent with each batch and part of the goldens key."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from harness.config.basics import DEFAULT_PROMPT_TEMPLATE
from harness.config.parse import Json, RequestFields


@dataclass(frozen=True)
class DecodingSettings:
    """How every request is decoded; part of the goldens key."""

    beam_width: int
    max_new_tokens: int
    length_penalty: float = 1.0
    early_stopping: bool = True
    prompt_template: str = DEFAULT_PROMPT_TEMPLATE
    chat: bool = False  # prompts wrapped in the tokenizer's chat template
    request_fields: RequestFields = ()  # --request-field, sent with every server request

    def as_dict(self) -> dict[str, Json]:
        """The settings as the goldens key them: ``chat`` only when on and the request fields
        only when given, so goldens recorded before either existed stay valid."""
        out: dict[str, Json] = {k: v for k, v in asdict(self).items() if k not in ("chat", "request_fields")}
        if self.chat:
            out["chat"] = True
        if self.request_fields:
            out["request_fields"] = self.extra_fields()
        return out

    def extra_fields(self) -> dict[str, Json]:
        """The --request-field fields as JSON values, for a request body."""
        return {key: json.loads(value) for key, value in self.request_fields}
