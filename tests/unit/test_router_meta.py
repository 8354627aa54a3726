"""#14.2: the consumer reads the router's metadata with ``router_meta`` (no EventHeaders object per
record); it must read every header exactly as ``EventHeaders.parse`` — the general path incident
tools use — does, or a consumer would dedupe, route or time an event differently from what the
tools show. Property over arbitrary headers: names from the router's set plus others, values plain,
JSON-quoted (stock Debezium's JSON header converter), half-quoted, empty or not UTF-8, repeated
names (the last wins). Shown to fail (scratch edits): with ``router_meta`` leaving a quoted ``id``
quoted, and with its ``eventType`` fallback taken only when ``event_type`` is absent (not empty).
"""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from postbox.codec import EventHeaders
from postbox.consumer.decoding import _headers

NAMES = st.sampled_from(["id", "event_type", "eventType", "aggregate_type", "created_at", "traceparent", "other"])
TEXTS = st.text(max_size=8) | st.sampled_from(["", '"', '""', '"x', 'x"', "OrderPlaced", "2026-12-01T03:04:05Z"])
VALUES = (
    TEXTS.map(str.encode)
    | TEXTS.map(lambda t: json.dumps(t).encode())
    | TEXTS.map(lambda t: json.dumps(json.dumps(t)).encode())
    | st.binary(max_size=6)
)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.tuples(NAMES, VALUES), max_size=8))
def test_the_consumers_metadata_is_what_parse_reads(raw: list[tuple[str, bytes]]) -> None:
    texts, meta = _headers(raw)
    expected = EventHeaders.parse(raw)
    assert meta == (expected.event_id, expected.event_type, expected.aggregate_type, expected.created_at)
    assert EventHeaders.of_texts(texts) == expected
    assert texts == {key: value.decode("utf-8", "replace") for key, value in raw}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(NAMES, VALUES | st.none()), max_size=8))
def test_null_headers_are_absent_from_the_metadata(raw: list[tuple[str, bytes | None]]) -> None:
    """A null value reads as "" in the event's headers but as absent in the metadata (a null after
    a value leaves the value in force), as EventHeaders.parse skips it."""
    _, meta = _headers(raw)
    expected = EventHeaders.parse(raw)
    assert meta == (expected.event_id, expected.event_type, expected.aggregate_type, expected.created_at)
