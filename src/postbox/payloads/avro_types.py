"""Which Python type a value of an Avro schema arrives as, in one table.

The decoders agree on it (fastavro for Avro payloads; :mod:`postbox.codec.json_conform` converts
JSON payloads to the same types), the fit check holds annotations to it, and the code generator
writes it. One table, so the three cannot drift.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

from postbox.codec.validate import PRIMITIVES  # the Avro primitive names, defined once

#: (Avro type, logical type or None) -> the Python type the value arrives as.
SCALAR_TYPES: dict[tuple[str, str | None], type] = {
    ("null", None): type(None),
    ("boolean", None): bool,
    ("int", None): int,
    ("long", None): int,
    ("float", None): float,
    ("double", None): float,
    ("string", None): str,
    ("bytes", None): bytes,
    ("fixed", None): bytes,
    ("enum", None): str,
    ("string", "uuid"): uuid.UUID,
    ("bytes", "decimal"): Decimal,
    ("fixed", "decimal"): Decimal,
    ("int", "date"): dt.date,
    ("int", "time-millis"): dt.time,
    ("long", "time-micros"): dt.time,
    ("long", "timestamp-millis"): dt.datetime,
    ("long", "timestamp-micros"): dt.datetime,
    ("long", "local-timestamp-millis"): dt.datetime,
    ("long", "local-timestamp-micros"): dt.datetime,
}

#: Annotations that also read a scalar, beyond its own type (a UUID may be read as its text).
ALSO_ACCEPTED: dict[type, tuple[type, ...]] = {uuid.UUID: (str,)}


def resolve(schema: Any, names: Mapping[str, Any]) -> Any:
    """A named type's reference (``"postbox.events.order.LineItem"``) → its definition."""
    if isinstance(schema, str) and schema not in PRIMITIVES:
        return names[schema]
    return schema


def kind_of(schema: Any) -> tuple[str, str | None]:
    """(Avro type, logical type) of a resolved non-union schema."""
    if isinstance(schema, str):
        return schema, None
    return schema["type"], schema.get("logicalType")


def scalar_type(schema: Any) -> type | None:
    """The Python type of a resolved scalar schema (unknown logical types read as their base type)."""
    kind, logical = kind_of(schema)
    return SCALAR_TYPES.get((kind, logical)) or SCALAR_TYPES.get((kind, None))


def short_name(full_name: str) -> str:
    return full_name.rsplit(".", 1)[-1]


def describe(schema: Any, names: Mapping[str, Any]) -> str:
    """How messages name an Avro type: ``long (timestamp-millis)``, ``array of LineItem``, ``null | string``."""
    if isinstance(schema, list):
        return " | ".join(describe(branch, names) for branch in schema)
    schema = resolve(schema, names)
    kind, logical = kind_of(schema)
    if logical is not None:
        return f"{kind} ({logical})"
    if kind in ("record", "enum", "fixed"):
        return f"{kind} {short_name(schema['name'])}"
    if kind == "array":
        return f"array of {describe(schema['items'], names)}"
    if kind == "map":
        return f"map of {describe(schema['values'], names)}"
    return kind


def hint_text(schema: Any, names: Mapping[str, Any], class_name: Callable[[str], str] = short_name) -> str:
    """The annotation that reads ``schema``, as source text: ``int``, ``list[LineItem]``, ``str | None``.

    ``class_name`` maps a record's full name to the class that reads it (the generator qualifies
    names that collide)."""
    if isinstance(schema, list):
        parts = [hint_text(branch, names, class_name) for branch in schema if branch != "null"]
        return " | ".join(parts + (["None"] if "null" in schema else []))
    schema = resolve(schema, names)
    kind, _ = kind_of(schema)
    if kind == "record":
        return class_name(schema["name"])
    if kind == "array":
        return f"list[{hint_text(schema['items'], names, class_name)}]"
    if kind == "map":
        return f"dict[str, {hint_text(schema['values'], names, class_name)}]"
    python = scalar_type(schema)
    assert python is not None, schema  # parse_schema refuses unknown types
    return "None" if python is type(None) else python.__name__
