"""One declaration per run option: a field of ``RunConfig`` (or of a group it holds, such as
``EngineOptions``) whose metadata is an ``Option``: flag, help, how its text is parsed, its
bound and who reads it; the field gives its name, type and default. The CLI, the pytest
plugin, ``RunConfig.from_options`` and docs/options.md all read the table ``options()`` makes
from those fields."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from harness.bounds import Range
from harness.model.vocab import Backend, Receiver

T = TypeVar("T")
OPTION = "harness.option"  # the dataclass field metadata key an Option lives under
Parser = Callable[[str, "Range | None"], Callable[[str], object]]


@dataclass(frozen=True)
class Option:
    """One run option. Declared by ``option()`` with its flag, help (``{default}`` in it is
    replaced by the default), parser, bound and receiver; ``dest``, ``default`` and ``group``
    are filled in from the field that declares it."""

    flag: str
    help: str
    receiver: Receiver
    parse: Parser | None = None  # None: the text itself, or a flag (store_true) for a bool
    bound: Range | None = None
    metavar: str | None = None
    repeat: bool = False  # given once per value (argparse's action "append")
    read_by: tuple[Backend, ...] = ()  # for options read at engine load: the backends that read it
    dest: str = ""
    default: object = None
    group: str | None = None  # the RunConfig field holding the group it is declared in

    @property
    def server(self) -> bool:
        """Whether the option applies only to an OpenAI-compatible server."""
        return self.receiver == Receiver.SERVER

    @property
    def is_flag(self) -> bool:
        return isinstance(self.default, bool)

    @property
    def type(self) -> Callable[[str], object] | None:
        """The argparse ``type=`` of the option."""
        return self.parse(self.flag, self.bound) if self.parse is not None else None

    @property
    def shown_default(self) -> str:
        """The default as the help and docs/options.md show it."""
        value = self.default
        if isinstance(value, tuple):
            return ",".join(map(str, value))
        if isinstance(value, float):
            return f"{value:g}"
        return str(value)

    @property
    def text(self) -> str:
        """The help with its default."""
        return self.help.replace("{default}", self.shown_default)

    def argument(self, dest_prefix: str = "", default: object = None) -> dict[str, Any]:
        """The keyword arguments of ``add_argument`` (argparse) or ``addoption`` (pytest): a
        value not given is None, so RunConfig's default applies, unless ``default`` is given."""
        kwargs: dict[str, Any] = {"dest": dest_prefix + self.dest, "help": self.text}
        if self.is_flag:
            return {**kwargs, "action": "store_true", "default": bool(default)}
        kwargs.update(type=self.type or str, default=default, metavar=self.metavar)
        if self.repeat:
            kwargs["action"] = "append"
        return kwargs


def option(
    default: T,
    flag: str,
    help: str,
    receiver: Receiver,
    *,
    parse: Parser | None = None,
    bound: Range | None = None,
    metavar: str | None = None,
    repeat: bool = False,
    read_by: tuple[Backend, ...] = (),
) -> T:
    """A dataclass field that is a run option (its default, and the Option in its metadata)."""
    declared = Option(flag, help, receiver, parse, bound, metavar, repeat, read_by)
    made: T = field(default=default, metadata={OPTION: declared})
    return made


def path_option(
    factory: Callable[[], Path], flag: str, help: str, receiver: Receiver, *, metavar: str
) -> Path:
    """A folder option whose default is computed when a config is made (the user's cache)."""
    declared = Option(flag, help, receiver, metavar=metavar)
    made: Path = field(default_factory=factory, metadata={OPTION: declared})
    return made


GROUP = "harness.option-group"  # the metadata key of a field that holds a group of options
G = TypeVar("G")


def group(cls: type[G]) -> G:
    """A dataclass field holding a group of options (a dataclass of ``option()`` fields) that
    one stage or engine receives whole, e.g. ``EngineOptions``."""
    made: G = field(default_factory=cls, metadata={GROUP: cls})
    return made


def groups(cls: type) -> dict[str, type]:
    """The fields of ``cls`` that hold a group of options, and the group's class."""
    return {f.name: kind for f in dataclasses.fields(cls) if isinstance(kind := f.metadata.get(GROUP), type)}


def _default(f: dataclasses.Field[object]) -> object:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def declared(cls: type, group_name: str | None = None) -> Iterator[Option]:
    """The options a dataclass declares, in field order, with each field's name and default;
    a field that holds a group of options is walked (``group_name`` names that field)."""
    for f in dataclasses.fields(cls):
        found, inner = f.metadata.get(OPTION), f.metadata.get(GROUP)
        if isinstance(found, Option):
            yield dataclasses.replace(found, dest=f.name, default=_default(f), group=group_name)
        elif isinstance(inner, type):
            yield from declared(inner, f.name)
