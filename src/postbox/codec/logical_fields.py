"""Reading a record's top-level logical-type fields (``timestamp-millis``, ``date``, ``uuid``, ...)
without fastavro's per-value logical-type dispatch.

Why: for every value of a field with a logical type, fastavro's reader builds the type's name
(``"long-timestamp-millis"``), looks its reader up and calls it; on an ``OrderPlaced`` payload that
dispatch was ~3 µs of the ~7.7 µs read (the conversion itself, ``epoch + timedelta``, ~0.6 µs),
once per consumed record. :func:`plain_reading` gives the writer schema with those fields' logical
types taken off (fastavro reads them as the plain ``long``/``int``/``string`` underneath) and the
conversions to run afterwards: fastavro's OWN logical readers, called with the same arguments
fastavro passes them, so the payload is the same value.

Only what is safe by construction takes this path: a record whose logical types all sit directly
on its top-level fields, over a primitive type fastavro has a reader for. A logical type anywhere
else (inside an array, a union, a nested record, on a ``fixed``) leaves the schema to fastavro's
general path (:func:`plain_reading` returns None), as does any reading that resolves into another
reader version (the codec decides that: resolution is fastavro's, logical types included).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from fastavro import parse_schema
from fastavro.read import LOGICAL_READERS

#: One conversion: (field name, fastavro's logical reader, the field's writer type it is given).
Conversion = tuple[str, Callable[..., Any], dict[str, Any]]

#: The base types a stripped logical type may sit on (named types such as ``fixed`` are not stripped).
_PRIMITIVE = frozenset({"int", "long", "string", "bytes"})
#: Keys fastavro adds to a parsed schema; dropped from the copy before it is parsed again.
_PARSED_KEYS = ("__fastavro_parsed", "__named_schemas")


def plain_reading(parsed: dict[str, Any] | Any) -> tuple[dict[str, Any], tuple[Conversion, ...]] | None:
    """(the writer schema without its top-level fields' logical types, parsed; the conversions to
    apply to the payload fastavro reads with it), or None when the schema must be read as it is
    (no logical type to take off, or one this module does not handle)."""
    if not isinstance(parsed, dict) or parsed.get("type") != "record":
        return None
    plain = {key: value for key, value in parsed.items() if key not in _PARSED_KEYS}
    fields: list[dict[str, Any]] = []
    conversions: list[Conversion] = []
    for field in plain.get("fields", ()):
        kind = field.get("type")
        reader = _logical_reader(kind)
        if reader is not None:
            conversions.append((field["name"], reader, kind))
            field = {**field, "type": kind["type"]}
        elif _has_logical(kind):
            return None  # a logical type deeper down: fastavro's general path
        fields.append(field)
    if not conversions:
        return None
    plain["fields"] = fields
    parsed_plain: dict[str, Any] = parse_schema(copy.deepcopy(plain))  # type: ignore[assignment]  # a record schema parses to a dict
    return parsed_plain, tuple(conversions)


def _logical_reader(kind: Any) -> Callable[..., Any] | None:
    """fastavro's reader of a field type like ``{"type": "long", "logicalType": "timestamp-millis"}``."""
    if not isinstance(kind, dict) or "logicalType" not in kind or kind.get("type") not in _PRIMITIVE:
        return None
    return LOGICAL_READERS.get(f"{kind['type']}-{kind['logicalType']}")


def _has_logical(node: Any) -> bool:
    if isinstance(node, dict):
        return "logicalType" in node or any(_has_logical(value) for key, value in node.items() if key not in _PARSED_KEYS)
    if isinstance(node, list):
        return any(_has_logical(value) for value in node)
    return False


def apply(payload: Any, conversions: tuple[Conversion, ...]) -> Any:
    """Convert the payload's logical-type fields in place, as fastavro would have (reader schema
    None: no resolution on this path). ``payload``: the record (a dict) fastavro read."""
    for name, reader, kind in conversions:
        payload[name] = reader(payload[name], kind, None)
    return payload


__all__ = ["Conversion", "apply", "plain_reading"]
