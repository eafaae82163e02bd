"""Optional packages, imported only when a backend that needs them loads.

A missing package is one line naming the pip extra that installs it, never a traceback;
a package that is installed but fails to import (CUDA, TensorRT libraries) says so.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from harness.errors import EngineError, describe

DISTRIBUTION = "batch-position-harness"


def require(module: str, *, backend: str, package: str, extra: str) -> ModuleType:
    """Import ``module`` for ``backend``; EngineError naming ``pip install "...[extra]"``."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if exc.name == module.split(".")[0] or exc.name == module:
            raise EngineError(
                f'the {backend} backend needs {package}: pip install "{DISTRIBUTION}[{extra}]"'
            ) from None
        raise EngineError(_broken(module, backend, package, exc)) from None
    except Exception as exc:  # a package's own import-time failure (missing GPU libraries)
        raise EngineError(_broken(module, backend, package, exc)) from None


def _broken(module: str, backend: str, package: str, exc: BaseException) -> str:
    return (
        f"the {backend} backend: {package} is installed but `import {module}` failed "
        f"({describe(exc)}); check its CUDA and TensorRT libraries"
    )
