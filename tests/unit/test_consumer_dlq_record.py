"""The two forms of a dead letter (#12.4), as values: full when it fits the DLQ topic's
``max.message.bytes``, reference-only (metadata, error, where the original is) when it does not."""

from __future__ import annotations

from datetime import datetime, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from postbox.consumer.blocks import Blocks
from postbox.consumer.dlq_record import DLQ_HEADERS, Failure, Origin, letter_for

WHEN = datetime(2026, 1, 1, tzinfo=timezone.utc)
ROUTER = [("id", b"0190f0aa-0000-7000-8000-000000000001"), ("event_type", b"OrderPlaced"), ("aggregate_type", b"order"),
          ("created_at", b"2026-01-01T00:00:00Z"), ("traceparent", b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")]


def _origin(value_bytes: int, key: bytes = b"order-1", extra: list | None = None) -> Origin:
    return Origin("outbox.event.order", 2, 41, key, b"v" * value_bytes, ROUTER + (extra or []))


def test_a_record_that_fits_is_dead_lettered_in_full():
    origin = _origin(1000)
    letter = letter_for(origin, Failure("HandlerError:ValueError", "boom"), group="g", limit=1_048_588, failed_at=WHEN)
    assert not letter.reference_only
    assert (letter.topic, letter.key, letter.value) == ("outbox.event.order.dlq", b"order-1", origin.value)
    assert letter.headers[: len(ROUTER)] == ROUTER
    assert [k for k, _ in letter.headers[len(ROUTER):]] == list(DLQ_HEADERS)


def test_a_record_too_large_for_the_topic_becomes_reference_only_with_where_the_original_is():
    origin = _origin(300_000, extra=[("big", b"h" * 5000)])
    letter = letter_for(origin, Failure("HandlerError:ValueError", "boom"), group="g", limit=100_000, failed_at=WHEN)
    headers = dict(letter.headers)
    assert letter.reference_only and letter.value is None and letter.key == b"order-1"
    assert letter.size <= 100_000
    assert headers["postbox.reference-only"] == b"true"
    assert int(headers["postbox.original.bytes"]) == origin.size
    assert "big" not in headers  # only the router's small metadata headers are kept
    assert all(headers[k] == v for k, v in ROUTER)
    assert (headers["postbox.origin.topic"], headers["postbox.origin.partition"], headers["postbox.origin.offset"]) == (b"outbox.event.order", b"2", b"41")
    error = headers["postbox.error"].decode()
    assert error.startswith("boom") and "outbox.event.order[2]@41" in error and "100,000" in error
    assert headers["postbox.error.class"] == b"HandlerError:ValueError"


def test_a_huge_key_is_dropped_from_a_reference_only_dead_letter():
    letter = letter_for(_origin(10, key=b"k" * 2_000_000), Failure("DecodeError", "bad"), group="g", limit=1_048_588, failed_at=WHEN)
    assert letter.reference_only and letter.key is None and letter.size < 10_000


@settings(max_examples=100, deadline=None)
@given(value=st.integers(0, 400_000), key=st.integers(0, 5000), limit=st.integers(20_000, 1_100_000), error=st.text(max_size=3000))
def test_whichever_form_is_chosen_fits_the_limit(value, key, limit, error):
    letter = letter_for(_origin(value, key=b"k" * key), Failure("HandlerError:X", error), group="g", limit=limit, failed_at=WHEN)
    assert letter.size <= limit
    assert letter.reference_only == (letter.value is None)


def test_blocks_keep_the_lowest_offset_per_partition():
    blocks = Blocks()
    blocks.block(("t", 0), 7, "dlq", "refused")
    blocks.block(("t", 0), 3, "handler", "timeout")
    blocks.block(("t", 0), 9, "dlq", "refused")
    assert blocks.get(("t", 0)).offset == 3 and blocks.get(("t", 0)).reason == "handler"
    assert blocks.covers(("t", 0), 3) and blocks.covers(("t", 0), 8) and not blocks.covers(("t", 0), 2)
    assert not blocks.covers(("t", 1), 100) and ("t", 1) not in blocks
