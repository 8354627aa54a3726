"""The JSON codec: payloads as UTF-8 JSON, as a stock Debezium outbox setup writes them.

Stock setups store the payload in a ``jsonb``/``text`` column; depending on the converter the
Kafka value is the JSON document itself or that document as a JSON *string* (encoded twice).
Both are accepted. The event type comes from the record's header, not from the bytes.
"""

from __future__ import annotations

import json
import math
import uuid
from datetime import date, datetime, time
from decimal import Decimal
from typing import Any, Mapping

from postbox.codec.avro import DecodedEvent
from postbox.errors import DecodeError, PayloadError

#: Values with no JSON form that are written as their text (``str()``), as they always were.
AS_TEXT = (datetime, date, time, uuid.UUID, Decimal)


class JsonCodec:
    """Encode and decode UTF-8 JSON payloads."""

    def encode(self, payload: Mapping[str, Any], event_type: str = "") -> bytes:
        """Compact UTF-8 JSON, strict (RFC 8259: no NaN or Infinity), so tools other than postbox
        parse it; datetimes, dates, times, UUIDs and Decimals become their text. Any other value
        raises PayloadError naming the field, never a silent ``str()`` of it (a set would become
        the text ``{1, 2}``)."""
        try:
            return json.dumps(payload, separators=(",", ":"), ensure_ascii=False, allow_nan=False,
                              default=_as_text).encode("utf-8")  # fmt: skip
        except (ValueError, TypeError, UnicodeEncodeError):
            found = _misfit(payload, "")
            if found is None:
                raise
            where, value, why = found
            raise PayloadError(f"{event_type or 'payload'}: field {where} {why}", event_type=event_type, field=where,
                               value=value, fix="pass a JSON value there (a string, number, boolean, null, list or mapping)") from None  # fmt: skip

    def decode(
        self, value: bytes, *, event_type: str | None = None, aggregate_type: str | None = None
    ) -> DecodedEvent:
        """Parse a JSON object payload; DecodeError says what the bytes were instead."""
        label = f"{event_type} " if event_type else ""
        try:
            data = json.loads(bytes(value).decode("utf-8"))
            if isinstance(data, str):  # a JSON document carried as a JSON string
                data = json.loads(data)
        except UnicodeDecodeError as exc:
            raise DecodeError(f"{label}JSON payload is not UTF-8 (byte {exc.start}: {bytes(value)[exc.start:exc.start + 1].hex()})") from None
        except json.JSONDecodeError as exc:
            raise DecodeError(f"{label}payload is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
        except RecursionError:
            raise DecodeError(f"{label}JSON payload is nested too deeply to read ({len(value):,} bytes; Python's recursion limit)") from None
        except ValueError as exc:  # e.g. an integer of more digits than int() reads (sys.set_int_max_str_digits)
            raise DecodeError(f"{label}JSON payload cannot be read: {exc}") from None
        if not isinstance(data, dict):
            raise DecodeError(f"{label}JSON payload is a {type(data).__name__}, expected an object")
        return DecodedEvent(payload=data, event_type=event_type, aggregate_type=aggregate_type, encoding="json")


def _as_text(value: Any) -> str:
    if isinstance(value, AS_TEXT):
        return str(value)
    raise TypeError(type(value).__name__)


def _misfit(value: Any, path: str) -> tuple[str, Any, str] | None:
    """Where the first value JSON cannot carry is (``a.b[2]``), the value and why; None if none."""
    if isinstance(value, float):
        return None if math.isfinite(value) else (path, value, f"is {value}, which JSON cannot carry (only finite numbers)")
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return path, value, "holds a lone surrogate, which is not UTF-8"
        return None
    if value is None or isinstance(value, (bool, int, *AS_TEXT)):
        return None
    if isinstance(value, Mapping):
        children = [(f"{path}.{key}" if path else str(key), item) for key, item in value.items()]
    elif isinstance(value, (list, tuple)):
        children = [(f"{path}[{i}]", item) for i, item in enumerate(value)]
    else:
        return path, value, f"is a {type(value).__name__}, which has no JSON form"
    return next((found for child, item in children if (found := _misfit(item, child)) is not None), None)
