"""Read a JSON payload into the Avro schema of its event, as Avro payloads are.

A stock Debezium outbox sends JSON; when ``schemas/`` has a schema for the event type, the consumer
holds the JSON payload to it like an Avro one: a field of the wrong type (``"due_days":
"fourteen"`` where the schema says ``int``), a missing field without default, a number out of range
is a :class:`DecodeError` naming the field (dead-lettered), and missing fields with a default get
it. Fields the schema does not know are dropped, as Avro's schema resolution drops fields a newer
writer added, so a producer one version ahead does not dead-letter its events.

JSON has no dates, timestamps or decimals: values of logical types are read into the Python types
the Avro decoder gives (``datetime``, ``date``, ``Decimal``, ``UUID``; see
:mod:`postbox.codec.json_logical` for the spellings accepted), so a handler sees the same payload
whichever encoding its event came in. ``bytes`` are strings, as in Avro's JSON encoding. Unions
take the plain value (``"coupon": "X"`` or ``null``), not Avro's tagged ``{"string": "X"}``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from postbox.codec.json_logical import read_logical
from postbox.codec.validate import PRIMITIVES, Invalid, validate
from postbox.schemas.repository import EventSchema


def conform(schema: EventSchema, payload: Mapping[str, Any]) -> dict[str, Any]:
    """``payload`` read into ``schema``; :class:`Invalid` names the first field that does not fit."""
    return _read(schema.parsed, schema.names, payload, "")  # type: ignore[no-any-return]


def _read(schema: Any, names: Mapping[str, Any], datum: Any, path: str) -> Any:
    if isinstance(schema, str) and schema not in PRIMITIVES:
        schema = names[schema]
    if isinstance(schema, list):
        return _union(schema, names, datum, path)
    kind = schema if isinstance(schema, str) else schema["type"]
    if kind == "record":
        return _record(schema, names, datum, path)
    if kind == "array" and isinstance(datum, list):
        return [_read(schema["items"], names, item, f"{path}[{i}]") for i, item in enumerate(datum)]
    if kind == "map" and isinstance(datum, Mapping):
        return {k: _read(schema["values"], names, v, f"{path}[{k!r}]") for k, v in datum.items()}
    if isinstance(schema, Mapping) and "logicalType" in schema:
        handled, value = read_logical(schema, datum, path)
        if handled:
            return value
    if _json_bytes(schema, datum):
        return datum
    validate(schema, names, datum, path)  # primitives, enums, logical types; names the misfit
    return datum


def _record(schema: Mapping[str, Any], names: Mapping[str, Any], datum: Any, path: str) -> dict[str, Any]:
    if not isinstance(datum, Mapping):
        raise Invalid(path, datum, f"expected a record (JSON object) {schema['name'].rsplit('.', 1)[-1]}, got {type(datum).__name__}")
    out: dict[str, Any] = {}
    for f in schema["fields"]:
        where = f"{path}.{f['name']}" if path else f["name"]
        if f["name"] in datum:
            out[f["name"]] = _read(f["type"], names, datum[f["name"]], where)
        elif "default" in f:
            out[f["name"]] = copy.deepcopy(f["default"])
        else:
            raise Invalid(where, None, "is missing (required, no default)")
    return out


def _union(branches: list[Any], names: Mapping[str, Any], datum: Any, path: str) -> Any:
    errors: list[Invalid] = []
    for branch in branches:
        try:
            return _read(branch, names, datum, path)
        except Invalid as exc:
            errors.append(exc)
    deepest = max(errors, key=lambda e: len(e.path))
    if deepest.path != path:
        raise deepest
    raise Invalid(path, datum, f"fits none of the union's types, got {type(datum).__name__}")


def _json_bytes(schema: Any, datum: Any) -> bool:
    """Avro's JSON encoding writes ``bytes``/``fixed`` (decimals included) as strings."""
    kind = schema if isinstance(schema, str) else schema.get("type")
    if kind == "fixed":
        return isinstance(datum, str) and len(datum) == schema["size"]
    return kind == "bytes" and isinstance(datum, str)
