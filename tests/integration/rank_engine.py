"""An emulator engine that logs every generate call, for the MPI tests.

Not a TensorRT-LLM double: it runs the emulator as usual and appends one line per call
(this process's rank, beam width and the prompts in position order) to
``RANK_ENGINE_LOG.rank<r>``, so a test can check that every rank drove the engine through
the same batches in the same order, as TensorRT-LLM's multi-GPU runners require.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from harness.engines.emulator.engine import EmulatorEngine
from harness.limits.ranks import current

if TYPE_CHECKING:
    from harness.config import DecodingSettings
    from harness.engines.base import Generation


class RecordingEngine(EmulatorEngine):
    def generate(self, prompts: Sequence[str], settings: DecodingSettings) -> list[Generation]:
        rank = current().rank
        line = {
            "rank": rank,
            "beam_width": settings.beam_width,
            "prompts": [hashlib.sha256(p.encode()).hexdigest()[:16] for p in prompts],
        }
        with open(f"{os.environ['RANK_ENGINE_LOG']}.rank{rank}", "a", encoding="utf-8") as log:
            log.write(json.dumps(line) + "\n")
        return super().generate(prompts, settings)
