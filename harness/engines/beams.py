"""Did the server run the beam search it was asked for? Checked on every answer.

A server asked for beam width W (``use_beam_search``, ``n: W``, ``best_of: W``) that does not
run beam search answers in one of two ways, both seen on real servers:

- **fewer than W choices**: llama-cpp-python ignores the three fields and returns one choice;
- **W identical choices**: llama.cpp's ``llama-server`` honours ``n: W`` by decoding the prompt
  W times greedily (sampling at temperature 0), so every choice is the same text.

Either way the cell would score greedy text as "beam W" and pass. The openai backend fails
the cell instead, with the reason (``BeamCheck.check`` returns it; the backend raises it).

**Checked on the answers, not by a probe at load.** The backend does not know the run's beam
widths when it loads; a probe would be an extra request with a prompt the run does not score,
on a server whose behaviour may depend on the request; and checking every answer also catches
a server that runs beam search for some requests and not others. It costs no request and is as
early as a probe on the first batch: one answer with fewer than W choices fails the cell at
once. W identical choices need ``IDENTICAL_ANSWERS`` answers at the same settings: a real
beam search can return W beams that decode to the same text for one prompt (different tokens,
the same characters), but not for 4 prompts in a row before any answer with distinct choices.
Evidence of beam search: any answer whose W choices are not all the same text, or a server
that says where it ran the request and at which width (``python -m harness serve``'s
``harness_batch.beam_width``); once seen at some settings, those settings are trusted.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.config import DecodingSettings

IDENTICAL_ANSWERS = 4
HINT = (
    "use --beam-widths 1 for this server, or a server that runs beam search (trtllm-serve, "
    "vLLM, python -m harness serve)"
)


class BeamCheck:
    """Per decoding settings: the answers seen so far, and whether beam search was shown."""

    def __init__(self) -> None:
        self._identical: dict[DecodingSettings, int] = {}
        self._shown: set[DecodingSettings] = set()

    def check(
        self,
        settings: DecodingSettings,
        choices: Sequence[Sequence[str]],
        reported: Sequence[int | None] = (),
    ) -> str | None:
        """The reason no beam search ran, or None; ``choices[i]`` are answer i's choice texts
        in order, ``reported[i]`` the beam width the server says it ran answer i at."""
        width = settings.beam_width
        if width == 1:
            return None
        for position, texts in enumerate(choices):
            if len(texts) < width:
                return (
                    f"the server returned {len(texts)} choice{'s' if len(texts) != 1 else ''} "
                    f"for best_of {width} (position {position}): no beam search ran (it "
                    f"ignores use_beam_search, n and best_of); {HINT}"
                )
        said = list(reported) + [None] * (len(choices) - len(reported))
        for texts, width_said in zip(choices, said):
            if width_said == width or len(set(texts[:width])) > 1:
                self._shown.add(settings)
        if settings in self._shown:
            return None
        count = self._identical.get(settings, 0) + len(choices)
        self._identical[settings] = count
        if count < IDENTICAL_ANSWERS:
            return None
        return (
            f"the server returned {width} identical choices for best_of {width} in each of "
            f"its first {count} answers: no beam search ran (it answers n: {width} with "
            f"{width} greedy copies); {HINT}"
        )
