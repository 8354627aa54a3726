"""Check a payload against an Avro schema before encoding, naming the field that does not fit.

fastavro's own writer errors say little about *where* a value went wrong, and it silently drops
keys the schema does not know (a typo'd field name would vanish from the event). This walk is
strict: unknown keys, missing required fields, wrong types and out-of-range numbers are all
reported with the dotted path of the field and the offending value.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from datetime import date, datetime, time
from decimal import Decimal
from typing import Any

INT_RANGE = (-(2**31), 2**31 - 1)
LONG_RANGE = (-(2**63), 2**63 - 1)
PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


class Invalid(Exception):
    """One misfit: the field path, the value and what was expected there."""

    def __init__(self, path: str, value: Any, problem: str) -> None:
        super().__init__(problem)
        self.path = path
        self.value = value
        self.problem = problem


def validate(schema: Any, names: Mapping[str, Any], datum: Any, path: str = "") -> None:
    """Raise Invalid for the first part of ``datum`` that ``schema`` (fastavro-parsed) rejects."""
    if isinstance(schema, str) and schema not in PRIMITIVES:
        schema = names[schema]
    if isinstance(schema, list):
        _union(schema, names, datum, path)
        return
    kind = schema if isinstance(schema, str) else schema["type"]
    logical = schema.get("logicalType") if isinstance(schema, dict) else None
    if logical and _logical(logical, schema, datum, path):
        return
    check = _NAMED_KINDS.get(kind)
    if check is not None:
        check(schema, names, datum, path)
    else:
        _primitive(kind, datum, path)


def _array(schema: Mapping[str, Any], names: Mapping[str, Any], datum: Any, path: str) -> None:
    if not isinstance(datum, (list, tuple)):
        raise Invalid(path, datum, f"expected an array (list), got {_type(datum)}")
    for i, item in enumerate(datum):
        validate(schema["items"], names, item, f"{path}[{i}]")


def _map(schema: Mapping[str, Any], names: Mapping[str, Any], datum: Any, path: str) -> None:
    if not isinstance(datum, Mapping):
        raise Invalid(path, datum, f"expected a map (dict), got {_type(datum)}")
    for key, value in datum.items():
        if not isinstance(key, str):
            raise Invalid(path, key, f"map keys must be strings, got {_type(key)}")
        validate(schema["values"], names, value, f"{path}[{key!r}]")


def _enum(schema: Mapping[str, Any], names: Mapping[str, Any], datum: Any, path: str) -> None:
    if datum not in schema["symbols"]:
        raise Invalid(path, datum, f"expected one of {', '.join(schema['symbols'])}")


def _fixed(schema: Mapping[str, Any], names: Mapping[str, Any], datum: Any, path: str) -> None:
    if not isinstance(datum, (bytes, bytearray)) or len(datum) != schema["size"]:
        raise Invalid(path, datum, f"expected exactly {schema['size']} bytes")


def _record(schema: Mapping[str, Any], names: Mapping[str, Any], datum: Any, path: str) -> None:
    if not isinstance(datum, Mapping):
        raise Invalid(path, datum, f"expected a record (dict) {schema['name'].rsplit('.', 1)[-1]}, got {_type(datum)}")
    known = {f["name"] for f in schema["fields"]}
    for key in datum:
        if key not in known:
            where = f"{path}.{key}" if path else str(key)
            raise Invalid(where, datum[key], f"is not a field of the schema (fields: {', '.join(sorted(known))})")
    for f in schema["fields"]:
        where = f"{path}.{f['name']}" if path else f["name"]
        if f["name"] not in datum:
            if "default" in f:
                continue
            raise Invalid(where, None, f"is missing (required {_describe(f['type'])}, no default)")
        validate(f["type"], names, datum[f["name"]], where)


#: The complex (non-primitive, non-union) kinds, each checked by its own function.
_NAMED_KINDS: dict[str, Callable[[Mapping[str, Any], Mapping[str, Any], Any, str], None]] = {
    "record": _record,
    "array": _array,
    "map": _map,
    "enum": _enum,
    "fixed": _fixed,
}


def _union(branches: list[Any], names: Mapping[str, Any], datum: Any, path: str) -> None:
    errors = []
    for branch in branches:
        try:
            validate(branch, names, datum, path)
            return
        except Invalid as exc:
            errors.append(exc)
    # A value that is a record of the union's only record branch: report the inner problem.
    deepest = max(errors, key=lambda e: len(e.path))
    if deepest.path != path:
        raise deepest
    raise Invalid(path, datum, f"expected one of {_describe(branches)}, got {_type(datum)}")


def _primitive(kind: str, datum: Any, path: str) -> None:
    ok: bool
    if kind == "null":
        ok = datum is None
    elif kind == "boolean":
        ok = isinstance(datum, bool)
    elif kind in ("int", "long"):
        if isinstance(datum, int) and not isinstance(datum, bool):
            low, high = INT_RANGE if kind == "int" else LONG_RANGE
            if not low <= datum <= high:
                raise Invalid(path, datum, f"is out of range for {kind} ({low} .. {high})")
            return
        ok = False
    elif kind in ("float", "double"):
        ok = isinstance(datum, (int, float)) and not isinstance(datum, bool)
    elif kind == "bytes":
        ok = isinstance(datum, (bytes, bytearray, memoryview))
    elif kind == "string":
        ok = isinstance(datum, str)
    else:  # pragma: no cover - parse_schema rejects unknown types
        raise Invalid(path, datum, f"unknown Avro type {kind}")
    if not ok:
        raise Invalid(path, datum, f"expected {kind}, got {_type(datum)}")


def _logical(logical: str, schema: Mapping[str, Any], datum: Any, path: str) -> bool:
    """Validate a logical type's accepted Python values; False: not handled, check the base type."""
    if logical in ("timestamp-millis", "timestamp-micros"):
        if isinstance(datum, datetime):
            if datum.tzinfo is None:
                raise Invalid(path, datum, f"{logical} needs a timezone-aware datetime (naive datetimes are ambiguous)")
            return True
        return False  # an int of epoch units is valid too
    if logical in ("local-timestamp-millis", "local-timestamp-micros"):
        return isinstance(datum, datetime)
    if logical == "date":
        return isinstance(datum, date) and not isinstance(datum, datetime)
    if logical in ("time-millis", "time-micros"):
        return isinstance(datum, time)
    if logical == "decimal":
        if isinstance(datum, Decimal):
            exponent = datum.as_tuple().exponent
            scale = schema.get("scale", 0)
            if isinstance(exponent, int) and -exponent > scale:
                raise Invalid(path, datum, f"has more than {scale} decimal places")
            return True
        return False
    if logical == "uuid":
        if isinstance(datum, uuid.UUID):
            return True
        if isinstance(datum, str):
            try:
                uuid.UUID(datum)
            except ValueError:
                raise Invalid(path, datum, "is not a UUID") from None
            return True
        return False
    return False


def _type(value: Any) -> str:
    return "null (None)" if value is None else type(value).__name__


def _describe(schema: Any) -> str:
    if isinstance(schema, list):
        return " | ".join(_describe(s) for s in schema)
    if isinstance(schema, dict):
        if schema.get("logicalType"):
            return f"{schema['type']} ({schema['logicalType']})"
        if schema["type"] in ("record", "enum", "fixed"):
            return str(schema["name"]).rsplit(".", 1)[-1]
        if schema["type"] == "array":
            return f"array of {_describe(schema['items'])}"
        if schema["type"] == "map":
            return f"map of {_describe(schema['values'])}"
        return str(schema["type"])
    return str(schema).rsplit(".", 1)[-1]
