"""Does a payload class read what an event's schema delivers? Checked before the first record.

A handler annotated ``event: Event[OrderPaid]`` is held to the reader schema of each event type it
is registered for. Refused (each misfit named with its dotted field path):

- a field the class requires that the schema does not have (it could never be filled);
- a field whose annotation cannot hold the schema's values (``str`` for a ``long``, ``date`` for a
  ``timestamp-millis``, ``int`` for a ``double``);
- an optional schema field (a union with ``null``) annotated without ``| None``: the handler would
  meet ``None`` where its type says it cannot.

Allowed, because nothing the handler relies on can break: schema fields the class leaves out (it
reads a subset, as an Avro reader schema may), class fields with a default that the schema lacks,
and ``X | None`` for a field the schema always fills.
"""

from __future__ import annotations

import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from postbox.payloads.avro_types import ALSO_ACCEPTED, describe, hint_text, kind_of, resolve, scalar_type, short_name
from postbox.payloads.shape import MAPPING_ORIGINS, SEQUENCE_ORIGINS, fields_of, is_open, is_payload_class, name_of, union_members

NONE = type(None)


@dataclass(frozen=True)
class Misfit:
    """One field the annotation cannot read as the schema delivers it."""

    path: str
    problem: str


def misfits(hint: Any, schema: Any, names: Mapping[str, Any]) -> list[Misfit]:
    """Every misfit between the annotation ``hint`` and the fastavro-parsed ``schema``."""
    return list(_fit(hint, schema, names, ""))


def _fit(hint: Any, schema: Any, names: Mapping[str, Any], path: str) -> Iterator[Misfit]:
    if is_open(hint):
        return
    schema = resolve(schema, names)
    if isinstance(schema, list):
        yield from _fit_union_schema(hint, schema, names, path)
        return
    members = union_members(hint)
    if members is not None:
        readers = [m for m in members if m is not NONE]
        if len(readers) == 1:
            yield from _fit(readers[0], schema, names, path)
        elif not any(_reads(m, schema, names) for m in readers):
            yield _wrong(hint, schema, names, path)
        return
    kind, _ = kind_of(schema)
    if kind == "record":
        yield from _fit_record(hint, schema, names, path)
    elif kind in ("array", "map"):
        yield from _fit_container(hint, schema, names, path)
    elif not _reads_scalar(hint, schema):
        yield _wrong(hint, schema, names, path)


def _fit_union_schema(hint: Any, branches: list[Any], names: Mapping[str, Any], path: str) -> Iterator[Misfit]:
    members = union_members(hint) or (hint,)
    readers = [m for m in members if m is not NONE]
    if "null" in branches and NONE not in members:
        yield Misfit(path, f"is optional in the schema ({describe(branches, names)}) but annotated {name_of(hint)}: annotate it {name_of(hint)} | None")
    for branch in (b for b in branches if b != "null"):
        if len(readers) == 1:
            yield from _fit(readers[0], branch, names, path)
        elif not any(_reads(m, branch, names) for m in readers):
            yield _wrong(hint, branch, names, path)


def _fit_record(hint: Any, schema: Mapping[str, Any], names: Mapping[str, Any], path: str) -> Iterator[Misfit]:
    origin = typing.get_origin(hint)
    if hint in MAPPING_ORIGINS or origin in MAPPING_ORIGINS:
        values = typing.get_args(hint)[1] if len(typing.get_args(hint)) == 2 else Any
        for f in schema["fields"]:
            yield from _fit(values, f["type"], names, _join(path, f["name"]))
        return
    if not is_payload_class(hint):
        yield _wrong(hint, schema, names, path)
        return
    by_name = {f["name"]: f for f in schema["fields"]}
    for spec in fields_of(hint):
        where = _join(path, spec.name)
        found = by_name.get(spec.name)
        if found is not None:
            yield from _fit(spec.hint, found["type"], names, where)
        elif spec.required:
            known = ", ".join(by_name) or "none"
            yield Misfit(where, f"is required by {hint.__name__} but {short_name(schema['name'])} has no such field (its fields: {known})")


def _fit_container(hint: Any, schema: Mapping[str, Any], names: Mapping[str, Any], path: str) -> Iterator[Misfit]:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if schema["type"] == "array" and (hint in SEQUENCE_ORIGINS or origin in SEQUENCE_ORIGINS):
        yield from _fit(args[0] if args else Any, schema["items"], names, f"{path}[]")
    elif schema["type"] == "map" and (hint in MAPPING_ORIGINS or origin in MAPPING_ORIGINS):
        yield from _fit(args[1] if len(args) == 2 else Any, schema["values"], names, f"{path}[]")
    else:
        yield _wrong(hint, schema, names, path)


def _reads(hint: Any, schema: Any, names: Mapping[str, Any]) -> bool:
    return not any(True for _ in _fit(hint, schema, names, ""))


def _reads_scalar(hint: Any, schema: Any) -> bool:
    python = scalar_type(schema)
    if python is None:
        return False
    if typing.get_origin(hint) is Literal and kind_of(schema)[0] == "enum":
        return set(schema["symbols"]) <= set(typing.get_args(hint))
    return hint is python or hint in ALSO_ACCEPTED.get(python, ())


def _wrong(hint: Any, schema: Any, names: Mapping[str, Any], path: str) -> Misfit:
    return Misfit(path, f"is {describe(schema, names)} in the schema but annotated {name_of(hint)}: annotate it {hint_text(schema, names)}")


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name
