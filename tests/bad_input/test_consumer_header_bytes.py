"""Bad-input catalogue: router headers whose values are not UTF-8, null or repeated, produced by
kafka-python (an independent client; confluent-kafka for null values, which kafka-python's producer
refuses), one partition, a good event after every bad record.

Why (#14.2 review): the consumer's per-record header decoding became a strict ``bytes.decode()``
comprehension that falls back to a replacing decode only when a value is not UTF-8 or is null
(``consumer/decoding.py``). The unit property test checks the two paths agree on a list of
headers; this checks what a user relies on end to end, with records another team's service could
really write: a stray byte in a header postbox does not need (``traceparent``, ``created_at``, one
of the application's own) never costs the event — it is applied once, in order, the byte read as
U+FFFD and an unreadable ``created_at`` as none; a repeated ``id`` is read as its last value (as
``EventHeaders.parse`` and the incident tools read it); an ``id`` that is null or not UTF-8 is a
missing or malformed id — dead-lettered with that reason, its original header bytes kept in the
dead letter unchanged — and the partition moves on.

Shown to fail (scratch edits of ``_headers``): with the fallback caught for ``AttributeError`` only
(a UnicodeDecodeError then dead-lettered the good events with a stray byte: "cannot decode:
UnicodeDecodeError"), and with the replacing decode dropped from the fallback (the same).
"""

from __future__ import annotations

import json
import uuid

import pytest

from postbox.consumer import App, ConsumerConfig
from postbox.effects import Effects, aggregate_keys
from postbox.events import Event
from tests.apps.counting import record
from tests.support.consumers import ThreadedRuntime, committed, create_topic, produce, read_all, router_headers, wait_for
from tests.support.independent import produce_independently

pytestmark = pytest.mark.integration

TRACEPARENT = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def _produce_in_order(bootstrap: str, topic: str, records: list) -> None:
    """Each record by kafka-python, except one with a null header value (kafka-python's producer
    refuses those; confluent-kafka writes them), one after the other so the order holds."""
    for record_ in records:
        if any(value is None for _, value in record_[2]):
            produce(bootstrap, topic, [record_])
        else:
            produce_independently(bootstrap, topic, [record_])


def _app() -> App:
    app = App()

    @app.handler("*", "Counted")
    def counted(event: Event, fx: Effects) -> None:
        record(event, fx)
        k = aggregate_keys(event.aggregate_type, event.aggregate_id)
        seen = {"id": event.id, "traceparent": event.headers.get("traceparent"), "note": event.headers.get("note"),
                "created_at": None if event.created_at is None else event.created_at.isoformat()}
        fx.rpush(k("seen"), json.dumps(seen))

    return app


def test_header_values_not_utf8_null_or_repeated_are_read_as_documented(settings, redis_client, unique) -> None:
    agg = f"hdr{unique}"
    topic = f"outbox.event.{agg}"
    group = f"test-hdr-{unique}"
    create_topic(settings.kafka_bootstrap, topic, partitions=1)

    def hdr(event_id: str | None = None, **replace: bytes | None) -> list[tuple[str, bytes | None]]:
        headers = [(k, replace.pop(k) if k in replace else v) for k, v in router_headers(event_id or str(uuid.uuid4()), "Counted", agg)]
        return headers + list(replace.items())  # names not in the router's set are added at the end

    repeated_id = str(uuid.uuid4())
    # name -> (headers, None for applied with what the handler must see | (error class, fragment))
    cases: dict[str, tuple[list, dict | tuple[str, str]]] = {
        "traceparent not UTF-8": (hdr(traceparent=b"\xff" + TRACEPARENT[1:]), {"traceparent": "\ufffd" + TRACEPARENT[1:].decode()}),
        "own header not UTF-8": (hdr(note=b"caf\xe9"), {"note": "caf\ufffd"}),
        "own header null": (hdr(note=None), {"note": ""}),
        "created_at not UTF-8": (hdr(created_at=b"2026-12-01T06:00:00\xffZ"), {"created_at": None}),
        "id repeated, the last wins": (hdr("not an id at all") + [("id", repeated_id.encode())], {"id": repeated_id}),
        "id not UTF-8": (hdr(id=b"\xff\xfe" + str(uuid.uuid4()).encode()[2:]), ("DecodeError", "malformed 'id' header")),
        "id null": (hdr(id=None), ("DecodeError", "no 'id' header")),
        "id null after a value": (hdr() + [("id", None)], None),  # a null after a value leaves the value in force
    }
    records, expected_dlq, applied, seq = [], {}, {}, 0
    for name, (headers, outcome) in cases.items():
        seq += 1
        records.append((b"a", json.dumps({"seq": seq}).encode(), router_headers(str(uuid.uuid4()), "Counted", agg), 0))
        applied[seq] = {}
        seq += 1
        records.append((b"a", json.dumps({"seq": seq}).encode(), headers, 0))
        if isinstance(outcome, tuple):
            expected_dlq[len(records) - 1] = (name, *outcome, headers)
        else:
            applied[seq] = outcome or {}
    _produce_in_order(settings.kafka_bootstrap, topic, records)

    runtime = ThreadedRuntime(_app(), ConsumerConfig.load(group=group, topics=topic, handler_retries=0, batch_wait_ms=50)).start()
    try:
        wait_for(lambda: runtime.ok() and committed(settings.kafka_bootstrap, group, topic, 1) == {0: len(records)}, 60,
                 f"the partition committed to its end ({len(records)})")
        assert runtime.ok()  # no record ended the consumer
    finally:
        runtime.stop()

    # Every good event applied once, in order; what its handler saw of the odd headers is as documented.
    k = aggregate_keys(agg, "a")
    assert [int(x) for x in redis_client.lrange(k("seq"), 0, -1)] == list(applied)
    seen = [json.loads(x) for x in redis_client.lrange(k("seen"), 0, -1)]
    for (seq_no, want), got in zip(applied.items(), seen):
        for field, value in want.items():
            assert got[field] == value, (seq_no, field, got)

    # Each bad id: dead-lettered with its reason, its original headers (bytes, nulls) kept as they came.
    dlq = read_all(settings.kafka_bootstrap, f"{topic}.dlq", expect=len(expected_dlq))
    by_offset = {int(dict(m.headers())["postbox.origin.offset"]): m for m in dlq}
    assert set(by_offset) == set(expected_dlq), {o: dict(m.headers())["postbox.error"] for o, m in by_offset.items()}
    for offset, (name, cls, fragment, headers) in expected_dlq.items():
        letter = dict(by_offset[offset].headers())
        assert letter["postbox.error.class"].decode() == cls, name
        assert fragment in letter["postbox.error"].decode(), (name, letter["postbox.error"])
        originals = [(k2, v) for k2, v in by_offset[offset].headers() if not k2.startswith("postbox.")]
        assert originals == headers, name
    redis_client.delete(k("seq"), k("count"), k("seen"), f"postbox:failures:{group}")
