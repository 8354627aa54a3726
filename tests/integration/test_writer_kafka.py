"""Acceptance, end to end: emit → PostgreSQL → Debezium → Kafka → decode (the real stack)."""

from __future__ import annotations

import shutil
import time
import uuid
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

import psycopg
import pytest
from confluent_kafka import Consumer

from postbox.codec import AvroCodec, EventHeaders, decode_record
from postbox.outbox import NewEvent, Outbox
from postbox.schemas import SchemaRepository
from postbox.settings import Settings

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=timezone.utc)


def repo_for(aggregate: str, tmp_path: Path) -> SchemaRepository:
    shutil.copytree(ROOT / "schemas" / "order", tmp_path / aggregate)
    return SchemaRepository.load(tmp_path)


def placed(order_id: str, **extra: object) -> dict:
    return {"order_id": order_id, "customer_id": "c", "total_cents": 5, "placed_at": NOW,
            "items": [{"sku": "s", "quantity": 1, "unit_price_cents": 5}], **extra}


def read(settings: Settings, topic: str, expect: int, timeout: float = 90.0, linger: float = 3.0) -> list:
    """Records of ``topic`` from the start until ``expect`` arrived (or timeout), then ``linger`` more."""
    consumer = Consumer({
        "bootstrap.servers": settings.kafka_bootstrap,
        "group.id": f"test-writer-{uuid.uuid4().hex}",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "topic.metadata.refresh.interval.ms": 500,
    })
    consumer.subscribe([topic])
    records: list = []
    deadline = time.monotonic() + timeout
    settle: float | None = None
    try:
        while time.monotonic() < deadline and (settle is None or time.monotonic() < settle):
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                if msg.error():
                    continue  # UNKNOWN_TOPIC_OR_PART until the router creates the topic
                records.append(msg)
            if settle is None and len(records) >= expect:
                settle = time.monotonic() + linger
    finally:
        consumer.close()
    return records


def test_committed_emit_arrives_once_and_decodes_rolled_back_never(
    settings: Settings, pg_conn: psycopg.Connection, unique: str, tmp_path: Path
) -> None:
    agg = f"t{unique}"
    repo = repo_for(agg, tmp_path)
    outbox = Outbox(codec=AvroCodec(repo))
    pg_conn.execute("CREATE TEMP TABLE orders (id text PRIMARY KEY, total bigint)")
    pg_conn.commit()
    with pytest.raises(RuntimeError):
        with outbox.transaction(pg_conn) as tx:
            tx.execute("INSERT INTO orders VALUES ('lost', 1)")
            tx.emit(agg, "lost", "OrderPlaced", placed("lost"))
            raise RuntimeError("the business transaction fails")
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    with outbox.transaction(pg_conn) as tx:
        tx.execute("INSERT INTO orders VALUES ('kept', 5)")
        event = tx.emit(agg, "kept", "OrderPlaced", placed("kept", currency="USD"), traceparent=traceparent)

    records = read(settings, event.topic, expect=1)
    assert len(records) == 1, [r.key() for r in records]
    msg = records[0]
    assert msg.key() == b"kept"
    headers = EventHeaders.parse(msg.headers())
    assert headers.event_id == str(event.id)
    assert headers.event_type == "OrderPlaced" and headers.traceparent == traceparent
    decoded = decode_record(msg.value(), msg.headers(), repository=repo)
    assert decoded.payload == {**placed("kept", currency="USD"), "coupon": None}
    # The same bytes read by a v1 consumer: the new fields are skipped.
    assert decode_record(msg.value(), msg.headers(), repository=repo, reader_version=1).payload == placed("kept")


def test_batch_of_10000_arrives_complete_and_in_order_per_aggregate(
    settings: Settings, pg_conn: psycopg.Connection, unique: str, tmp_path: Path
) -> None:
    agg = f"t{unique}"
    repo = repo_for(agg, tmp_path)
    outbox = Outbox(codec=AvroCodec(repo))
    events = [NewEvent(agg, f"a{i % 37}", "OrderPlaced", placed(str(i))) for i in range(10_000)]
    with pg_conn.transaction():
        emitted = outbox.emit_many(pg_conn, events)

    records = read(settings, emitted[0].topic, expect=10_000, timeout=180)
    ids = [EventHeaders.parse(r.headers()).event_id for r in records]
    assert len(records) == 10_000 and set(ids) == {str(e.id) for e in emitted}
    sent: dict[bytes, list[str]] = defaultdict(list)
    for e in emitted:
        sent[e.aggregate_id.encode()].append(str(e.id))
    got: dict[bytes, list[str]] = defaultdict(list)
    for r in records:
        got[r.key()].append(EventHeaders.parse(r.headers()).event_id)
    assert got == sent  # per aggregate (Kafka key), exactly the emit order
    first = decode_record(records[0].value(), records[0].headers(), repository=repo)
    assert first.event_type == "OrderPlaced" and first.writer_version == 2


def test_folded_emit_arrives_like_an_emit(settings: Settings, pg_conn: psycopg.Connection, unique: str, tmp_path: Path) -> None:
    """#17 execute_and_emit: the event folded into the business statement reaches its topic with
    the same key, headers and payload as a separate emit; a rolled-back one never does."""
    agg = f"t{unique}"
    repo = repo_for(agg, tmp_path)
    outbox = Outbox(codec=AvroCodec(repo))
    pg_conn.execute("CREATE TEMP TABLE orders (id text PRIMARY KEY, total bigint)")
    pg_conn.commit()
    insert = "INSERT INTO orders VALUES (%s, %s) RETURNING id"
    with pytest.raises(RuntimeError):
        with pg_conn.transaction():
            outbox.execute_and_emit(pg_conn, insert, ("lost", 1), agg, "lost", "OrderPlaced", placed("lost"))
            raise RuntimeError("the business transaction fails")
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    with pg_conn.transaction():
        cur, event = outbox.execute_and_emit(pg_conn, insert, ("kept", 5), agg, "kept", "OrderPlaced",
                                             placed("kept"), traceparent=traceparent)
        assert cur.fetchone() == ("kept",)

    records = read(settings, event.topic, expect=1)
    assert [r.key() for r in records] == [b"kept"]
    headers = EventHeaders.parse(records[0].headers())
    assert (headers.event_id, headers.event_type, headers.traceparent) == (str(event.id), "OrderPlaced", traceparent)
    assert decode_record(records[0].value(), records[0].headers(), repository=repo).payload == {**placed("kept"), "coupon": None, "currency": "EUR"}
