"""The headers the Outbox Event Router puts on each Kafka record, parsed.

The router copies outbox columns into headers: ``id``, ``event_type``, ``aggregate_type``,
``created_at`` and ``traceparent``. Depending on the header converter a string header arrives as
plain UTF-8 (``SimpleHeaderConverter``) or as a JSON string with quotes (``JsonConverter``);
both are accepted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterable, Mapping, Union, overload

from postbox.frozen import assemble

HeaderInput = Union[Iterable[tuple[str, "bytes | str | None"]], Mapping[str, "bytes | str | None"], None]


@dataclass(frozen=True)
class EventHeaders:
    """The outbox metadata of one Kafka record (None where a header is absent)."""

    event_id: str | None = None
    event_type: str | None = None
    aggregate_type: str | None = None
    created_at: str | None = None
    traceparent: str | None = None

    @classmethod
    def parse(cls, headers: HeaderInput) -> "EventHeaders":
        """From confluent-kafka's ``msg.headers()`` (list of (key, bytes)) or a dict."""
        if headers is None:
            return cls()
        items = headers.items() if isinstance(headers, Mapping) else headers
        values: dict[str, str] = {}
        for key, raw in items:
            if raw is None:
                continue
            values[key] = header_text(raw)
        return cls(
            event_id=values.get("id"),
            event_type=values.get("event_type") or values.get("eventType"),
            aggregate_type=values.get("aggregate_type"),
            created_at=values.get("created_at"),
            traceparent=values.get("traceparent"),
        )

    @classmethod
    def of_texts(cls, texts: Mapping[str, str]) -> "EventHeaders":
        """From headers already decoded to text (absent or null headers left out), so a consumer
        that keeps every header's text decodes each header once: only these five are unquoted
        (the first four as :func:`router_meta` reads them)."""
        event_id, event_type, aggregate_type, created_at = router_meta(texts)
        return assemble(cls, {"event_id": event_id, "event_type": event_type, "aggregate_type": aggregate_type,
                              "created_at": created_at, "traceparent": _unquoted(texts.get("traceparent"))})  # fmt: skip


#: What the consumer reads of the router's headers for every record: (id, event_type,
#: aggregate_type, created_at), None where absent.
RouterMeta = tuple["str | None", "str | None", "str | None", "str | None"]


def router_meta(texts: Mapping[str, str]) -> RouterMeta:
    """The router's metadata of headers already decoded to text (absent or null headers left
    out), with :func:`header_text`'s unquoting: :meth:`EventHeaders.of_texts` without building an
    object, for the consumer's per-record path. A value is unquoted only when it starts with a
    quote; ``event_type`` falls back to ``eventType`` when it is absent or empty."""
    get = texts.get
    event_type = get("event_type")
    if not event_type or event_type[0] == '"':
        event_type = _unquoted(event_type) or _unquoted(get("eventType"))
    event_id, aggregate_type, created_at = get("id"), get("aggregate_type"), get("created_at")
    return (
        header_text(event_id) if event_id and event_id[0] == '"' else event_id,
        event_type,
        header_text(aggregate_type) if aggregate_type and aggregate_type[0] == '"' else aggregate_type,
        header_text(created_at) if created_at and created_at[0] == '"' else created_at,
    )


def _unquoted(text: str | None) -> str | None:
    return header_text(text) if text is not None and text[:1] == '"' else text


@overload
def header_text(raw: bytes | str) -> str: ...


@overload
def header_text(raw: None) -> None: ...


def header_text(raw: bytes | str | None) -> str | None:
    """A header value as text, the way the codec reads it: UTF-8 (bad bytes replaced), and a
    JSON-quoted string (stock Debezium's JSON header converter) unquoted. Incident commands show
    header text with the same rule."""
    if raw is None:
        return None
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, (bytes, bytearray)) else str(raw)
    if len(text) >= 2 and text[0] == '"' and text[-1] == '"':
        try:
            decoded = json.loads(text)
        except json.JSONDecodeError:
            return text
        if isinstance(decoded, str):
            return decoded
    return text
