"""What a payload class declares: its fields, their type hints and whether each is required.

A payload class is a dataclass or a TypedDict (stdlib only: no model library to install, and both
read well in a handler). The fit check (:mod:`postbox.payloads.fit`) and the builder
(:mod:`postbox.payloads.build`) read classes through this module so that they agree on what "a
field" and "required" mean: a dataclass field without a default, a TypedDict key in
``__required_keys__``.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import types
import typing
from dataclasses import dataclass
from typing import Any, Union, is_typeddict

#: Annotations that mean "whatever the decoder delivers": no build, no check.
OPEN_HINTS: tuple[Any, ...] = (Any, object)
#: Containers a list of the schema may be annotated with (a list is built in each case).
SEQUENCE_ORIGINS: tuple[Any, ...] = (list, collections.abc.Sequence, collections.abc.Iterable, collections.abc.Collection)
#: Containers a map (or a record read as a mapping) may be annotated with.
MAPPING_ORIGINS: tuple[Any, ...] = (dict, collections.abc.Mapping)


@dataclass(frozen=True)
class FieldSpec:
    """One declared field: its name, its resolved type hint, and whether the class needs it."""

    name: str
    hint: Any
    required: bool


def is_payload_class(tp: Any) -> bool:
    """A dataclass type or a TypedDict: the classes a handler may ask its payload to be built as."""
    return isinstance(tp, type) and (dataclasses.is_dataclass(tp) or is_typeddict(tp))


def fields_of(cls: type) -> list[FieldSpec]:
    """The fields of a payload class, in declaration order (``get_type_hints`` resolves strings)."""
    hints = typing.get_type_hints(cls, include_extras=True)
    if is_typeddict(cls):
        required_keys = getattr(cls, "__required_keys__", frozenset(hints))
        out = []
        for name, hint in hints.items():
            # Under `from __future__ import annotations` Python 3.11 fills __required_keys__ before the
            # strings are read, so NotRequired[...] is also looked for in the resolved hint itself.
            marker = typing.get_origin(hint)
            required = marker is typing.Required or (marker is not typing.NotRequired and name in required_keys)
            out.append(FieldSpec(name, _bare(hint), required))
        return out
    specs = []
    for f in dataclasses.fields(cls):
        if f.init:
            needed = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            specs.append(FieldSpec(f.name, _bare(hints[f.name]), needed))
    return specs


def _bare(hint: Any) -> Any:
    """``Required[X]``, ``NotRequired[X]``, ``ReadOnly[X]``, ``Annotated[X, ...]`` → ``X``."""
    while typing.get_origin(hint) in (typing.Required, typing.NotRequired, typing.Annotated):
        hint = typing.get_args(hint)[0]
    return hint


def union_members(hint: Any) -> tuple[Any, ...] | None:
    """The members of ``A | B`` / ``Optional[A]``; None when ``hint`` is not a union."""
    origin = typing.get_origin(hint)
    if origin is Union or origin is types.UnionType:
        return typing.get_args(hint)
    return None


def is_open(hint: Any) -> bool:
    """``Any`` or ``object``: the decoded value is passed as it is, unchecked."""
    return any(hint is open_hint for open_hint in OPEN_HINTS)


def name_of(hint: Any) -> str:
    """How messages show an annotation: ``int``, ``list[LineItem]``, ``str | None``."""
    if isinstance(hint, type) and not typing.get_args(hint):
        return hint.__name__
    text = repr(hint)
    return text.replace("typing.", "").replace("collections.abc.", "").replace("datetime.", "").replace("decimal.", "")
