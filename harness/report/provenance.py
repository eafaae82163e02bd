"""What was tested, on what: environment, engine files and goldens, for the sign-off record."""

from __future__ import annotations

import platform
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from harness import __version__
from harness.model.engine import EngineFile
from harness.model.json import JsonObject
from harness.storage.fingerprint import file_sha256

ENGINE_FILE_PATTERNS = ("config.json", "*.engine", "*.safetensors")


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _driver() -> str | None:
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def environment() -> JsonObject:
    """Versions and hardware the run used."""
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {
        "harness": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "host": platform.node(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpu": gpu,
        "driver": _driver() if gpu else None,
        "transformers": _version("transformers"),
        "datasets": _version("datasets"),
        "rouge_score": _version("rouge-score") or _version("rouge_score"),
        "tensorrt_llm": _version("tensorrt_llm") or _version("tensorrt-llm"),
    }


def engine_files(path: str) -> tuple[EngineFile, ...]:
    """config.json and weight/engine files of an engine or model directory, with sha256."""
    folder = Path(path)
    if not folder.is_dir():
        return ()
    files = sorted({p for pattern in ENGINE_FILE_PATTERNS for p in folder.glob(pattern) if p.is_file()})
    return tuple(EngineFile(name=p.name, bytes=p.stat().st_size, sha256=file_sha256(p)) for p in files)
