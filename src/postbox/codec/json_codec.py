"""The JSON codec: payloads as UTF-8 JSON, as a stock Debezium outbox setup writes them.

Stock setups store the payload in a ``jsonb``/``text`` column; depending on the converter the
Kafka value is the JSON document itself or that document as a JSON *string* (encoded twice).
Both are accepted. The event type comes from the record's header, not from the bytes.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from postbox.codec.avro import DecodedEvent
from postbox.errors import DecodeError


class JsonCodec:
    """Encode and decode UTF-8 JSON payloads."""

    def encode(self, payload: Mapping[str, Any]) -> bytes:
        """Compact UTF-8 JSON (non-JSON values such as datetimes become strings)."""
        return json.dumps(payload, separators=(",", ":"), ensure_ascii=False, default=str).encode("utf-8")

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
