"""Backends by name as lazy ``module:attr`` strings, detection from a directory, user classes."""

from __future__ import annotations

import difflib
import importlib
import inspect
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from harness.config import OPTIONS, EngineOptions, Option
from harness.config.basics import BUNDLED, is_url
from harness.engines.base import AdoptedEngine, EngineBase, as_engine, class_label, generates
from harness.errors import EngineError, describe
from harness.limits.engine_config import load_config_json, read_limits
from harness.model.json import Json
from harness.model.limits import EngineLimits
from harness.model.vocab import Backend
from harness.redact import redact_url, remember_url

BACKENDS: dict[Backend, str] = {
    Backend.EMULATOR: "harness.engines.emulator.engine:EmulatorEngine",
    Backend.HF: "harness.engines.hf:HFEngine",
    Backend.TRTLLM: "harness.engines.trtllm:TrtllmEngine",
    Backend.LLMAPI: "harness.engines.llmapi:LlmApiEngine",
    Backend.OPENAI: "harness.engines.openai:OpenAIEngine",
}
URL_BACKEND = Backend.OPENAI  # chosen for --engine http://... and https://...
# the options read when an engine loads, passed in EngineOptions to a class that takes ``options``
LOAD_OPTIONS = tuple(o for o in OPTIONS if o.group == "engine_options" and not o.server)


def _readers(spec: Option) -> str:
    """'the trtllm and llmapi backends'."""
    names = " and ".join(b.value for b in spec.read_by)
    return f"the {names} backend{'s' if len(spec.read_by) > 1 else ''}"


def _import_module(name: str, roots: Sequence[Path]) -> ModuleType:
    """``import name``; a module that is not on sys.path but lies in one of ``roots`` (pytest's
    rootdir, the current folder) is imported from there, as a user of pytest expects."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        top = name.partition(".")[0]
        if exc.name != top:  # the module was found and lacks something it imports
            raise
        for root in roots:
            folder = Path(root).resolve()
            if (folder / f"{top}.py").is_file() or (folder / top / "__init__.py").is_file():
                if str(folder) not in sys.path:
                    sys.path.insert(0, str(folder))
                return importlib.import_module(name)
        raise


def _import(target: str, option: str, roots: Sequence[Path] = ()) -> object:
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise EngineError(f"{option} {target!r}: expected module:Class")
    searched = [*roots, Path.cwd()]
    try:
        module = _import_module(module_name, searched)
    except ModuleNotFoundError as exc:
        where = ", ".join(dict.fromkeys(str(Path(r).resolve()) for r in searched))
        hint = (
            ""
            if exc.name != module_name.partition(".")[0]
            else f"; it is neither on sys.path nor in {where}: run from the folder that holds it, "
            "or add that folder to PYTHONPATH"
        )
        raise EngineError(f"{option} {target!r}: cannot import {module_name!r} ({exc}){hint}") from None
    except ImportError as exc:
        raise EngineError(f"{option} {target!r}: cannot import {module_name!r} ({exc})") from None
    except (Exception, SystemExit) as exc:  # the module's own code raised while importing
        raise EngineError(
            f"{option} {target!r}: importing {module_name!r} raised "
            f"{describe(exc)}; fix the module or its environment"
        ) from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise EngineError(f"{option} {target!r}: module {module_name!r} has no {attr!r}") from None
    except Exception as exc:  # a module __getattr__ of its own
        raise EngineError(
            f"{option} {target!r}: reading {attr!r} from {module_name!r} raised {describe(exc)}"
        ) from None


def _is_class_spec(spec: str) -> bool:
    return ":" in spec and not Path(spec).exists() and "/" not in spec.split(":", 1)[0]


def detect_backend(path: Path) -> str:
    """emulator, trtllm (a TensorRT-LLM engine directory) or hf, from the directory's contents."""
    config = load_config_json(path, option="--engine")
    config_file = path / "config.json"
    if "emulator" in config:
        return "emulator"
    if "model_type" in config or "architectures" in config:
        return "hf"
    if "build_config" in config or "builder_config" in config or "version" in config:
        return "trtllm"  # a TensorRT-LLM engine; its backend reports a damaged config
    raise EngineError(
        f"{config_file}: neither an engine config (pretrained_config/build_config) "
        "nor a transformers config (model_type); pass --backend explicitly"
    )


def resolve_backend(name: str, roots: Sequence[Path] = ()) -> object:
    """The class behind a backend name or a module:Class string (looked for in ``roots`` too
    when it is not on sys.path)."""
    if name in BACKENDS:
        return _import(BACKENDS[Backend(name)], "--backend")
    if ":" in name:
        return _import(name, "--backend", roots)
    close = difflib.get_close_matches(name, [b.value for b in BACKENDS], n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise EngineError(
        f"--backend {name!r}: unknown backend{hint} (known: {', '.join(BACKENDS)}, or module:Class)"
    )


def _bundled(spec: str, backend: str | None) -> tuple[str, str | None]:
    if spec == BUNDLED and backend is None:
        from harness.engines.emulator.build import bundled_engine

        return str(bundled_engine()), "emulator"
    return spec, backend


def engine_folder(spec: str, backend: str | None = None) -> Path | None:
    """The engine's directory, known without loading it (the bundled one is built first if
    need be); None for a server or a module:Class engine without one."""
    spec, backend = _bundled(spec, backend)
    if is_url(spec) or backend == URL_BACKEND or (backend is None and _is_class_spec(spec)):
        return None
    return Path(spec).expanduser()


def peek_config(spec: str, backend: str | None = None) -> dict[str, Json] | None:
    """The engine config.json (build limits) without loading the engine; None for engines
    that have none (hf model directories, module:Class engines without a directory)."""
    spec, backend = _bundled(spec, backend)
    if is_url(spec) or backend == URL_BACKEND:
        return None  # a server has no config.json; its limits are the server's business
    if backend is None and _is_class_spec(spec):
        return None
    if backend is not None and backend not in BACKENDS and ":" not in backend:
        resolve_backend(backend)  # raises the "did you mean" message
    path = Path(spec).expanduser()
    name = backend or detect_backend(path)  # the same checks and messages as loading
    if name == Backend.HF or (":" in name and not (path / "config.json").is_file()):
        return None
    config = load_config_json(path, option="--engine")
    return config if ("build_config" in config or "builder_config" in config) else None


def _parameters(cls: object) -> set[str]:
    if not callable(cls):
        return set()
    try:
        return set(inspect.signature(cls).parameters)
    except (TypeError, ValueError):
        return set()


def _construct(
    cls: object, label: str, target: str | None, kwargs: dict[str, object], signature_hint: str | None = None
) -> object:
    """``cls(target, **kwargs)``; a failing constructor is one EngineError line (a TypeError,
    where ``signature_hint`` is given, names the constructor the harness expects)."""
    try:
        if not callable(cls):  # what calling it would raise
            raise TypeError(f"{type(cls).__name__!r} object is not callable")
        return cls(target, **kwargs)
    except EngineError:
        raise
    except Exception as exc:  # a user's or a library's constructor: one line, not a traceback
        if signature_hint and isinstance(exc, TypeError):
            raise EngineError(f"{label}: cannot construct the engine ({exc}); {signature_hint}") from None
        raise EngineError(f"{label}: loading the engine failed: {describe(exc)}") from None


def options_read(cls: object) -> frozenset[str]:
    """The load options a backend class reads: those it declares (``reads_options``), else
    all of them when its constructor takes ``options``, else none."""
    declared = getattr(cls, "reads_options", None)
    if declared is not None:
        return frozenset(declared)
    return frozenset(o.dest for o in LOAD_OPTIONS) if "options" in _parameters(cls) else frozenset()


def refuse_unread(cls: object, label: str, options: EngineOptions) -> None:
    """An EngineError naming every load option given that the backend would ignore."""
    default, reads = EngineOptions(), options_read(cls)
    ignored = [
        o
        for o in LOAD_OPTIONS
        if getattr(options, o.dest) != getattr(default, o.dest) and o.dest not in reads
    ]
    if ignored:
        one = len(ignored) == 1
        it, does, they = ("it", "does", "it is") if one else ("them", "do", "they are")
        readers = sorted({_readers(o) for o in ignored})
        raise EngineError(
            f"{' and '.join(o.flag for o in ignored)} {does} not apply to the {label} backend "
            f"({they} read by {' and '.join(readers)} and by module:Class engines "
            f"that take `options`, and would be ignored here): drop {it}"
        )


def load_engine(
    spec: str,
    backend: str | None = None,
    options: EngineOptions | None = None,
    *,
    strict: bool = True,
    roots: Sequence[Path] = (),
) -> EngineBase:
    """Instantiate the engine named by --engine/--backend; a class whose constructor has an
    ``options`` parameter also gets the EngineOptions (tokenizer, special ids, runtime).
    ``strict``: a load option the class would ignore is refused (off for --golden-engine,
    which shares the options given for the engine under test). A module:Class not on sys.path
    is looked for in ``roots`` (pytest's rootdir) and the current folder."""
    spec, backend = _bundled(spec, backend)
    options = options or EngineOptions()
    if is_url(spec) or backend == URL_BACKEND:
        return _load_url(spec, backend, options, strict, roots)
    if backend is None and _is_class_spec(spec):
        cls, path, label = _import(spec, "--engine", roots), None, spec
    else:
        path = Path(spec).expanduser()
        name = backend or detect_backend(path)
        if backend is not None and not path.exists() and ":" not in name:
            detect_backend(path)  # raises the missing-directory message
        cls, label = resolve_backend(name, roots), name
    where = str(path) if path is not None else None
    if strict:
        refuse_unread(cls, label, options)
    extra: dict[str, object] = {"options": options} if "options" in _parameters(cls) else {}
    engine = _construct(
        cls,
        label,
        where,
        extra,
        "a backend class takes one argument, the engine path (None for --engine module:Class)",
    )
    return adopt(engine, label, where)


def _server_kwargs(cls: object, options: EngineOptions) -> dict[str, object]:
    """--model, --request-timeout, --retries (those given) for the openai backend and its
    subclasses; for another class, those its constructor has parameters for."""
    from harness.engines.openai import OpenAIEngine  # URL_BACKEND's class

    given = {k: v for k, v in options.server_kwargs().items() if v is not None}
    if isinstance(cls, type) and issubclass(cls, OpenAIEngine):
        return given
    accepted = _parameters(cls)
    return {k: v for k, v in given.items() if k in accepted}


def _load_url(
    spec: str, backend: str | None, options: EngineOptions, strict: bool = True, roots: Sequence[Path] = ()
) -> EngineBase:
    """A server address: the openai backend (or a user's class, given the URL unchanged)."""
    remember_url(spec)  # its credentials are redacted from every string from now on
    name = backend or URL_BACKEND
    cls = resolve_backend(name, roots)
    if strict:
        refuse_unread(cls, name, options)
    engine = _construct(cls, name, spec, _server_kwargs(cls, options))
    return adopt(engine, name, redact_url(spec))  # a class without an EngineInfo: named redacted


def adopt(engine: object, label: str | None = None, path: str | None = None) -> EngineBase:
    """Check a backend object's interface: an ``EngineBase`` comes back itself, any other
    object with ``generate`` in an ``AdoptedEngine``; either way with an EngineInfo."""
    label = label or class_label(engine)
    if not generates(engine):
        raise EngineError(f"{label}: {type(engine).__name__} has no generate(prompts, settings)")
    adopted = as_engine(engine, label, path)
    if isinstance(adopted, AdoptedEngine):  # the class's own limits, else its folder's config.json
        own = getattr(engine, "limits", None)
        adopted.limits = own if isinstance(own, EngineLimits) else _folder_limits(path)
    return adopted


def _folder_limits(path: str | None) -> EngineLimits | None:
    """The build limits of a TensorRT-LLM config.json in ``path`` (None: no folder, or none there)."""
    if path is None or not (Path(path) / "config.json").is_file():
        return None
    config = load_config_json(Path(path), option="--engine")
    return (
        read_limits(config, str(Path(path) / "config.json"))
        if "build_config" in config or "builder_config" in config
        else None
    )
