"""Build the payload class a handler asked for from the decoded payload mapping.

The consumer decodes every payload into a mapping (Avro through the reader schema, JSON held to
the same schema by :mod:`postbox.codec.json_conform`), so values already have the Python types the
schema implies (``datetime`` for timestamps, ``Decimal`` for decimals, ...). The builder turns the
mapping into instances (nested records included) and still checks each value: a payload with no
schema to hold it to (a JSON-only app) or a hand-made test event must fail here, naming the field,
rather than reach the handler with a wrong type behind a type hint. Keys the class does not declare
are dropped, as Avro's schema resolution drops fields a reader does not know.

A builder is compiled once per class (a closure per field), not re-derived from the hints per event.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import typing
import uuid
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any, Literal

from postbox.errors import PayloadTypeError
from postbox.payloads.shape import MAPPING_ORIGINS, SEQUENCE_ORIGINS, fields_of, is_open, is_payload_class, name_of, union_members

#: value -> the built value; raises _Misfit. Paths are put together only when one is raised (the
#: enclosing builders add their segment as it passes), so a payload that fits pays for none.
Build = Callable[[Any], Any]


class _Misfit(Exception):
    def __init__(self, value: Any, problem: str) -> None:
        super().__init__(problem)
        self.value, self.problem = value, problem
        self.segments: list[str] = []  # innermost first: "[2]", ".quantity", ...

    def within(self, segment: str) -> "_Misfit":
        self.segments.append(segment)
        return self

    @property
    def path(self) -> str:
        return "".join(reversed(self.segments)).lstrip(".")


class PayloadBuilder:
    """``builder(mapping)`` → an instance of ``cls``; :class:`PayloadTypeError` names the field."""

    def __init__(self, cls: type) -> None:
        self.cls = cls
        self._build = compile_hint(cls, {})
        self._is_dataclass = dataclasses.is_dataclass(cls)

    def __call__(self, payload: Any) -> Any:
        if self._is_dataclass and isinstance(payload, self.cls):
            return payload  # a test event made with the class itself
        try:
            return self._build(payload)
        except _Misfit as exc:
            path = exc.path
            where = f"field {path!r}" if path else "the payload"
            shown = "" if exc.problem.startswith("is missing") else f" = {_short(exc.value)}"
            joint = " " if exc.problem.startswith("is ") else ": "
            raise PayloadTypeError(
                f"payload does not fit {self.cls.__name__}: {where}{shown}{joint}{exc.problem}", field=path or None,
            ) from None


def compile_hint(hint: Any, memo: dict[Any, Build]) -> Build:
    """The builder of one annotation (``memo`` ties the knot of recursive record classes)."""
    if is_open(hint):
        return _keep
    members = union_members(hint)
    if members is not None:
        return _union(members, memo)
    if is_payload_class(hint):
        return _record(hint, memo)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint in SEQUENCE_ORIGINS or origin in SEQUENCE_ORIGINS:
        return _list(compile_hint(args[0] if args else Any, memo))
    if hint in MAPPING_ORIGINS or origin in MAPPING_ORIGINS:
        return _map(compile_hint(args[1] if len(args) == 2 else Any, memo))
    if origin is Literal:
        return _literal(args)
    scalar = SCALARS.get(hint)
    if scalar is None:
        raise TypeError(f"{name_of(hint)} cannot be built from a payload (use a dataclass, TypedDict, list, dict, str, int, float, bool, bytes, "
                        "Decimal, datetime, date, time, UUID, Literal, or a union of them)")
    return scalar


def _keep(value: Any) -> Any:
    return value


def _record(cls: type, memo: dict[Any, Build]) -> Build:
    if cls in memo:
        return memo[cls]
    specs: list[tuple[str, bool, Build]] = []
    keeps_instances = dataclasses.is_dataclass(cls)

    def build(value: Any) -> Any:
        if not isinstance(value, Mapping):
            if keeps_instances and isinstance(value, cls):
                return value
            raise _Misfit(value, f"expected a record (mapping) for {cls.__name__}, got {type(value).__name__}")
        kwargs = {}
        for name, required, field_build in specs:
            if name in value:
                try:
                    kwargs[name] = field_build(value[name])
                except _Misfit as exc:
                    raise exc.within("." + name) from None
            elif required:
                raise _Misfit(None, f"is missing ({cls.__name__} requires it)").within("." + name)
        return cls(**kwargs)

    memo[cls] = build
    specs.extend((f.name, f.required, compile_hint(f.hint, memo)) for f in fields_of(cls))
    return build


def _union(members: tuple[Any, ...], memo: dict[Any, Build]) -> Build:
    nullable = type(None) in members
    builds = [compile_hint(m, memo) for m in members if m is not type(None)]
    shown = " | ".join(name_of(m) for m in members)

    def build(value: Any) -> Any:
        if value is None and nullable:
            return None
        deepest: _Misfit | None = None
        for one in builds:
            try:
                return one(value)
            except _Misfit as exc:
                if deepest is None or len(exc.segments) > len(deepest.segments):
                    deepest = exc
        if deepest is not None and deepest.segments:
            raise deepest  # the record branch it was meant for, and the field inside it that failed
        raise _Misfit(value, f"expected {shown}, got {type(value).__name__}")

    return build


def _list(item: Build) -> Build:
    def build(value: Any) -> Any:
        if not isinstance(value, (list, tuple)):
            raise _Misfit(value, f"expected a list, got {type(value).__name__}")
        out = []
        for i, v in enumerate(value):
            try:
                out.append(item(v))
            except _Misfit as exc:
                raise exc.within(f"[{i}]") from None
        return out

    return build


def _map(item: Build) -> Build:
    def build(value: Any) -> Any:
        if not isinstance(value, Mapping):
            raise _Misfit(value, f"expected a mapping, got {type(value).__name__}")
        out = {}
        for k, v in value.items():
            try:
                out[k] = item(v)
            except _Misfit as exc:
                raise exc.within(f"[{k!r}]") from None
        return out

    return build


def _literal(allowed: tuple[Any, ...]) -> Build:
    def build(value: Any) -> Any:
        if value not in allowed:
            raise _Misfit(value, f"expected one of {', '.join(map(repr, allowed))}")
        return value

    return build


def _exact(*accepted: type, reject: tuple[type, ...] = (), convert: Callable[[Any], Any] | None = None) -> Build:
    """A scalar check: ``isinstance`` of ``accepted`` but not of ``reject``, optionally converted."""
    expected = accepted[0].__name__

    def build(value: Any) -> Any:
        if isinstance(value, accepted) and not isinstance(value, reject):
            if convert is None:
                return value
            try:
                return convert(value)
            except ValueError as exc:  # e.g. a str that is no UUID
                raise _Misfit(value, f"is not a {expected}: {exc}") from None
        raise _Misfit(value, f"expected {expected}, got {type(value).__name__}")

    return build


#: The scalars of the schema's types, as the decoders deliver them (``bool`` is not an ``int`` here,
#: a ``datetime`` is not a ``date``; a ``uuid`` logical type arrives as ``UUID`` and may be read as ``str``).
SCALARS: dict[Any, Build] = {
    str: _exact(str, uuid.UUID, convert=str),
    int: _exact(int, reject=(bool,)),
    float: _exact(float, int, reject=(bool,), convert=float),
    bool: _exact(bool),
    bytes: _exact(bytes, bytearray, memoryview, convert=bytes),
    Decimal: _exact(Decimal),
    dt.datetime: _exact(dt.datetime),
    dt.date: _exact(dt.date, reject=(dt.datetime,)),
    dt.time: _exact(dt.time),
    uuid.UUID: _exact(uuid.UUID, str, convert=lambda v: v if isinstance(v, uuid.UUID) else uuid.UUID(v)),
    type(None): _exact(type(None)),
}


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
