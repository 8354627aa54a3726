"""Reading a record's top-level logical-type fields (``timestamp-millis``, ``date``, ``uuid``, ...)
without fastavro's per-value logical-type dispatch.

Why: for every value of a field with a logical type, fastavro's reader builds the type's name
(``"long-timestamp-millis"``), looks its reader up and calls it; on an ``OrderPlaced`` payload that
dispatch was ~3 µs of the ~7.7 µs read (the conversion itself, ``epoch + timedelta``, ~0.6 µs),
once per consumed record. :func:`plain_reading` gives the writer schema with those fields' logical
types taken off (fastavro reads them as the plain ``long``/``int``/``string`` underneath) and the
conversions to run afterwards: fastavro's OWN logical readers, called with the same arguments
fastavro passes them, so the payload is the same value — except the two timestamps
(``timestamp-millis``/``-micros``, on most events), which are converted by :func:`_timestamp_millis`
and :func:`_timestamp_micros`: ``datetime.fromtimestamp`` (~0.26 µs) instead of fastavro's
``epoch + timedelta(...)`` (~0.7 µs), from 1970 to 2106 (where a float holds the instant to
better than half a microsecond), fastavro's own reader before and after.

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

from datetime import datetime, timezone

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


#: Seconds from the epoch within which a double holds an instant to within 2**-22 s (< 0.24 µs: a
#: double's 53 bits less the 31 of the seconds), under half of a datetime's 1 µs resolution. The
#: quotient ``value / 1000`` (or ``/ 1_000_000``) is the double nearest the instant, and the instant
#: is a whole number of microseconds, so ``fromtimestamp``'s rounding to the microsecond gives it
#: exactly — fastavro's value. 2**32 s is 2106-02-07; later, and fastavro's reader converts (and
#: raises what it raises for a year beyond 9999). So does it before 1970: ``fromtimestamp`` of a
#: negative time raises OSError on Windows (why fastavro does not use it, CPython issue 36439).
_EXACT_SECONDS = 2**32
_EXACT_MILLIS = _EXACT_SECONDS * 1000
_EXACT_MICROS = _EXACT_SECONDS * 1_000_000
_UTC = timezone.utc
_from_timestamp = datetime.fromtimestamp
_fastavro_millis = LOGICAL_READERS["long-timestamp-millis"]
_fastavro_micros = LOGICAL_READERS["long-timestamp-micros"]


def _timestamp_millis(value: int, writer_schema: Any = None, reader_schema: Any = None) -> Any:
    """fastavro's ``timestamp-millis`` reading (an aware UTC datetime), at a third of its cost."""
    if 0 <= value < _EXACT_MILLIS:
        return _from_timestamp(value / 1000, _UTC)
    return _fastavro_millis(value, writer_schema, reader_schema)


def _timestamp_micros(value: int, writer_schema: Any = None, reader_schema: Any = None) -> Any:
    """fastavro's ``timestamp-micros`` reading (an aware UTC datetime), at a third of its cost."""
    if 0 <= value < _EXACT_MICROS:
        return _from_timestamp(value / 1_000_000, _UTC)
    return _fastavro_micros(value, writer_schema, reader_schema)


#: The conversions done here rather than by fastavro's reader (same values; module docs).
_OWN_READERS: dict[str, Callable[..., Any]] = {"long-timestamp-millis": _timestamp_millis, "long-timestamp-micros": _timestamp_micros}


def _logical_reader(kind: Any) -> Callable[..., Any] | None:
    """The reader of a field type like ``{"type": "long", "logicalType": "timestamp-millis"}``:
    fastavro's, or this module's faster one for the timestamps."""
    if not isinstance(kind, dict) or "logicalType" not in kind or kind.get("type") not in _PRIMITIVE:
        return None
    name = f"{kind['type']}-{kind['logicalType']}"
    return _OWN_READERS.get(name) or LOGICAL_READERS.get(name)


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
