"""The run's stages, in the order the orchestrator (``harness.pipeline``) calls them: prepare,
generate (and record goldens), score, analyse. The report stage is ``harness.report``."""
