"""Turning Kafka records into something an on-call engineer (and a script) can read.

Keys and header values are shown as UTF-8 text when they are printable text, and as hex
otherwise (never as mangled characters). Values go through the schema codec: Avro single-object
payloads are decoded with the writer schema found by fingerprint, JSON payloads parsed; anything
else (or a payload the codec refuses) is shown as hex with the codec's reason.
"""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

from postbox.codec import AvroCodec, EventHeaders, decode_record
from postbox.codec.headers import header_text
from postbox.errors import DecodeError, PostboxError

MAX_HEX = 4096


def safe_text(raw: bytes | str | None) -> tuple[str | None, str]:
    """(shown, encoding): printable UTF-8 as itself ("utf-8"), anything else as hex ("hex")."""
    if raw is None:
        return None, "null"
    if isinstance(raw, str):
        return raw, "utf-8"
    try:
        text = bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        return bytes(raw).hex(), "hex"
    if any(not ch.isprintable() and ch not in "\t\n\r" for ch in text):
        return bytes(raw).hex(), "hex"
    return text, "utf-8"


def printable(text: str | None) -> str:
    """``text`` safe to print on a terminal: every non-printable character (C0/C1 controls such as
    ESC and BEL, DEL, tab and newlines, format characters like bidi overrides) written as a Python
    escape (``\\x1b``, ``\\u202e``), so a hostile or broken record can neither retitle, clear nor
    reflow the engineer's terminal, and what was there stays visible."""
    if text is None:
        return ""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _escaped(ch) for ch in text)


def _escaped(ch: str) -> str:
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def utf8_text(raw: bytes | str | None) -> str | None:
    """``raw`` as UTF-8 text, control characters and all (None when it is not UTF-8): for people,
    through :func:`printable`, which shows ``\\x1b`` where hex would show ``1b``."""
    if raw is None or isinstance(raw, str):
        return raw
    try:
        return bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        return None


def jsonable(value: Any) -> Any:
    """A decoded payload made JSON-safe: datetimes ISO-8601, bytes hex, decimals strings."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            value = value.astimezone(timezone.utc)
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, (Decimal, uuid.UUID, timedelta)):
        return str(value)
    return value


def iso_ms(timestamp_ms: int | None) -> str | None:
    if timestamp_ms is None or timestamp_ms < 0:
        return None
    try:
        return datetime.fromtimestamp(timestamp_ms / 1000, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    except (ValueError, OverflowError, OSError):
        return f"{timestamp_ms} ms after 1970"


def parse_iso(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def uuid7_time(event_id: str | None) -> datetime | None:
    """The creation time inside a UUIDv7 event id (None for other UUID versions, and for a time
    part past what a datetime holds: ``ffffffff-ffff-7fff-…`` names the year 10889)."""
    try:
        parsed = uuid.UUID(str(event_id))
    except (ValueError, TypeError):
        return None
    if parsed.version != 7:
        return None
    try:
        return datetime.fromtimestamp((parsed.int >> 80) / 1000, tz=timezone.utc)
    except (ValueError, OverflowError, OSError):
        return None


EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def ago(delta: timedelta, now: datetime | None = None) -> datetime:
    """``now − delta``, no earlier than 1970 (Kafka has no record before): ``--since 100000000d``
    means "from the beginning", not an overflow."""
    now = now or datetime.now(timezone.utc)
    try:
        return max(EPOCH, now - delta)
    except OverflowError:
        return EPOCH


_TS_TYPES = {0: "none", 1: "create", 2: "log-append"}


@dataclass
class RecordView:
    """One Kafka record, decoded for display (see :meth:`as_dict` for the JSON shape)."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None
    timestamp_type: str
    key: str | None
    key_encoding: str
    headers: list[dict[str, Any]]
    meta: EventHeaders
    value_size: int
    encoding: str  # avro | json | bytes | null
    payload: Any = None
    value_hex: str | None = None
    decode_error: str | None = None
    writer: str | None = None
    raw_key: bytes | None = field(default=None, repr=False)
    raw_value: bytes | None = field(default=None, repr=False)
    raw_headers: list[tuple[str, bytes | None]] = field(default_factory=list, repr=False)

    @property
    def timestamp(self) -> str | None:
        return iso_ms(self.timestamp_ms)

    @property
    def key_text(self) -> str | None:
        """The key for people: its UTF-8 text (control characters left for printers to escape),
        else its hex."""
        text = utf8_text(self.raw_key)
        return text if text is not None else self.key

    def header(self, name: str) -> str | None:
        for h in self.headers:
            if h["key"] == name:
                return h["text"]
        return None

    def as_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "offset": self.offset,
            "timestamp": self.timestamp,
            "timestamp_ms": self.timestamp_ms,
            "timestamp_type": self.timestamp_type,
            "key": self.key,
            "key_encoding": self.key_encoding,
            "headers": [{"key": h["key"], "value": h["value"], "encoding": h["encoding"]} for h in self.headers],
            "event": {
                "id": self.meta.event_id,
                "type": self.meta.event_type,
                "aggregate_type": self.meta.aggregate_type,
                "created_at": self.meta.created_at,
                "traceparent": self.meta.traceparent,
            },
            "value": {
                "encoding": self.encoding,
                "size": self.value_size,
                "payload": jsonable(self.payload) if self.payload is not None else None,
                "writer_schema": self.writer,
                "hex": self.value_hex,
                "error": self.decode_error,
            },
        }


def render(msg: Any, codec: AvroCodec | None = None) -> RecordView:
    """Decode one confluent-kafka (or duck-typed) message for display; never raises for bad bytes."""
    raw_headers = list(msg.headers() or [])
    headers = []
    for key, raw in raw_headers:
        shown, enc = safe_text(raw)
        # "text": what a person reads (and dead-letter fields use) - the UTF-8 text even when it
        # holds control characters (printers escape them); hex only for bytes that are not UTF-8.
        text = header_text(raw) if enc == "utf-8" or utf8_text(raw) is not None else shown
        headers.append({"key": key, "value": shown, "encoding": enc, "text": text})
    meta = EventHeaders.parse(raw_headers)
    key, key_encoding = safe_text(msg.key())
    ts_type, ts = msg.timestamp()
    value = msg.value()
    view = RecordView(
        topic=msg.topic(), partition=msg.partition(), offset=msg.offset(),
        timestamp_ms=ts if ts_type else None, timestamp_type=_TS_TYPES.get(ts_type, str(ts_type)),
        key=key, key_encoding=key_encoding, headers=headers, meta=meta,
        value_size=len(value) if value is not None else 0, encoding="null",
        raw_key=msg.key(), raw_value=value, raw_headers=raw_headers,
    )
    if value is None:
        return view
    try:
        decoded = decode_record(value, raw_headers, codec=codec)
    except DecodeError as exc:
        view.encoding = "bytes"
        view.decode_error = exc.message
        view.value_hex = bytes(value[:MAX_HEX]).hex() + ("…" if len(value) > MAX_HEX else "")
        return view
    except PostboxError as exc:  # schema repository problems: still show the bytes
        view.encoding = "bytes"
        view.decode_error = exc.message
        view.value_hex = bytes(value[:MAX_HEX]).hex()
        return view
    view.encoding = decoded.encoding
    view.payload = decoded.payload
    if decoded.encoding == "avro":
        view.writer = f"{decoded.aggregate_type}.{decoded.event_type} v{decoded.writer_version} ({decoded.fingerprint})"
    return view


def payload_field(payload: Any, path: str) -> tuple[bool, Any]:
    """(found, value) of a dotted path in a decoded payload (list indexes allowed: items.0.sku)."""
    current = payload
    for part in path.split("."):
        if isinstance(current, dict) and part in current:
            current = current[part]
        elif isinstance(current, list) and part.lstrip("-").isdigit() and -len(current) <= int(part) < len(current):
            current = current[int(part)]
        else:
            return False, None
    return True, current


def field_matches(value: Any, wanted: str) -> bool:
    """A payload value compared with a filter's text: numbers by value, the rest as text."""
    value = jsonable(value)
    if isinstance(value, bool):
        return wanted.lower() == str(value).lower()
    if isinstance(value, (int, float)):
        try:
            return float(wanted) == float(value)
        except ValueError:
            return False
    if value is None:
        return wanted in ("null", "None", "")
    return str(value) == wanted


def b64(raw: bytes | None) -> str | None:
    return base64.b64encode(raw).decode() if raw is not None else None
