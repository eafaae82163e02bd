"""What the generation cache is keyed by, besides the batch itself: every input that can
change an engine's output.

- the engine: its backend, every file of its directory (by content) and what the backend
  says about itself once loaded (``EngineInfo.details``: device, compute dtype, runner, the
  end/pad ids and tokenizer it resolved; the emulator adds a digest of its own source);
- the options a backend reads at load (``EngineOptions``, every field: tokenizer, end and
  pad ids, TensorRT-LLM runtime, trust_remote_code, server options), the tokenizer folder by
  content, not by path;
- the engine's code: the source of the module of its class and of every class it inherits
  from, with every module of the package each lies in or, outside a package, the modules
  imported from its folder (``engine_code``), so that a changed plug-in (``--backend
  module:Class``) or two plug-ins of one name never share outputs; a class whose source
  cannot be read is not cached. A plug-in whose outputs depend on anything else (environment
  variables, files outside its directory) is keyed by none of it: run it with --no-cache;
- the libraries that compute the outputs (torch, transformers, tokenizers, tensorrt_llm) and
  the harness, and the GPU where there is one.

The decoding settings and the prompts of the batch are added per batch by
``GenerationCache``. The inputs are recorded in report.json (``cache.key``).
"""

from __future__ import annotations

import hashlib
import json
import sys
from importlib import metadata
from pathlib import Path

from harness import __version__
from harness.config import EngineOptions
from harness.model.engine import EngineInfo
from harness.model.json import Json, JsonObject, as_json
from harness.storage.fingerprint import file_sha256

LIBRARIES = ("torch", "transformers", "tokenizers", "tensorrt_llm")


def folder_digest(folder: Path) -> str:
    """sha256 over the relative name and content of every file below ``folder``."""
    h = hashlib.sha256()
    for file in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(f"{file.relative_to(folder).as_posix()}\n{file_sha256(file)}\n".encode())
    return h.hexdigest()


def content_digest(path: Path) -> str | None:
    """A folder's or a file's content hash; None when there is nothing at ``path``."""
    if path.is_dir():
        return folder_digest(path)
    return file_sha256(path) if path.is_file() else None


def library_versions() -> JsonObject:
    out: JsonObject = {}
    for name in LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def device() -> JsonObject:
    """The GPU outputs are computed on (none: the CPU)."""
    try:
        import torch

        if torch.cuda.is_available():
            return {"gpu": torch.cuda.get_device_name(0), "cuda": torch.version.cuda}
    except Exception:  # no torch, or a driver that cannot answer: the CPU
        pass
    return {"gpu": None}


def options_inputs(options: EngineOptions) -> JsonObject:
    """Every EngineOptions field; the tokenizer folder by content as well as by path."""
    dumped = as_json(options)
    out = {k: v for k, v in dumped.items() if k != "api_key_env"} if isinstance(dumped, dict) else {}
    # api_key_env: where a server's key is read from changes no output
    if options.tokenizer:
        out["tokenizer"] = {
            "path": options.tokenizer,
            "sha256": content_digest(Path(options.tokenizer).expanduser()),
        }
    return out


def _loaded_beside(folder: Path) -> set[Path]:
    """The files of the modules imported from ``folder`` itself (a plug-in's helpers)."""
    out = set()
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if isinstance(file, str) and Path(file).parent.resolve() == folder and Path(file).is_file():
            out.add(Path(file).resolve())
    return out


def _source_files(module_name: str) -> list[Path] | None:
    """The files of a module's code: the module's file and, in a package, every module of the
    package (its subpackages too); out of a package, the modules imported from its folder. []
    for the standard library and built-ins (the Python version is not an engine's code); None
    when the module has no file to read (defined in a session, or gone)."""
    top = module_name.partition(".")[0]
    if top in sys.stdlib_module_names or top == "builtins":
        return []
    module = sys.modules.get(module_name)
    file = getattr(module, "__file__", None)
    if not file or not Path(file).is_file():
        return None
    path = Path(file).resolve()
    folder = path.parent
    if (folder / "__init__.py").is_file():  # a package: its other modules are its code too
        return sorted({path, *(p.resolve() for p in folder.rglob("*.py") if p.is_file())})
    return sorted({path, *_loaded_beside(folder)})


def engine_code(cls: type) -> JsonObject | None:
    """What decides an engine's outputs besides its files and options: its class (a user's
    class, not the harness's wrapper around it: ``harness.engines.base.code_class``) and a
    sha256 over the source of the module of every class in its hierarchy, with their packages
    (``_source_files``); None when some of that code has no file to read (such an engine is
    not cached)."""
    files: set[Path] = set()
    for klass in cls.__mro__:
        found = _source_files(klass.__module__)
        if found is None:
            return None
        files.update(found)
    h = hashlib.sha256()
    for file in sorted(files, key=lambda f: (f.name, str(f))):
        h.update(f"{file.name}\n{file_sha256(file)}\n".encode())
    return {"class": f"{cls.__module__}:{cls.__qualname__}", "sha256": h.hexdigest()}


def key_inputs(
    info: EngineInfo, options: EngineOptions | None = None, code: JsonObject | None = None
) -> JsonObject | None:
    """Everything besides the batch that the outputs depend on; None for an engine without a
    directory (never cached). ``code``: the engine's ``engine_code``."""
    folder = Path(info.path)
    if not folder.is_dir():
        return None
    return {
        "backend": info.backend,
        "harness": __version__,
        "engine_files_sha256": folder_digest(folder),
        "engine_code": code,
        "engine_details": _plain(info.details),
        "options": options_inputs(options or EngineOptions()),
        "libraries": library_versions(),
        "device": device(),
    }


def _plain(details: dict[str, object]) -> Json:
    """An engine's own details as JSON: whatever is not JSON by its text."""
    plain: Json = json.loads(json.dumps(details, sort_keys=True, default=str))
    return plain


def fingerprint(inputs: JsonObject) -> str:
    """sha256 of the key inputs (canonical JSON)."""
    text = json.dumps(inputs, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
