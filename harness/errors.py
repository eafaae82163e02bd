"""One error hierarchy. Every message names the file, option or key and what to do."""

from __future__ import annotations


class HarnessError(Exception):
    """A problem the user can fix; shown as one message, never as a traceback."""


class ConfigError(HarnessError):
    """A bad option value or a bad combination of options."""


class DatasetError(HarnessError):
    """The dataset cannot be read or lacks the fields the run needs."""


class EngineError(HarnessError):
    """The engine directory or backend cannot be loaded."""


class GoldensError(HarnessError):
    """Goldens are missing, corrupt, or recorded for another run."""
