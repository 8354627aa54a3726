"""The foundation's promise, end to end on the real stack: an outbox row committed in
PostgreSQL becomes exactly one Kafka record, byte for byte, and nothing else does."""

from __future__ import annotations


import pytest

from tests.support.kafka import read_until
from tests.support.outbox_rows import insert_event

pytestmark = pytest.mark.integration


def test_committed_row_arrives_with_key_bytes_and_headers(settings, pg_conn, unique):
    aggregate_type = f"first{unique}"
    payload = bytes(range(256)) + b"\x00\xc3\x01 not utf-8 \xff\xfe"
    with pg_conn.transaction():
        event_id = insert_event(pg_conn, aggregate_type, "order-42", "OrderPlaced", payload)

    records = read_until(settings.kafka_bootstrap, f"outbox.event.{aggregate_type}", lambda rs: len(rs) >= 1, linger=2)

    assert len(records) == 1
    record = records[0]
    assert record.key == b"order-42"
    assert record.value == payload
    assert record.event_id == event_id
    assert record.headers["event_type"] == b"OrderPlaced"
    assert record.headers["aggregate_type"] == aggregate_type.encode()
    assert record.headers["created_at"]  # ISO-8601 creation time from the row


def test_rolled_back_transaction_produces_no_record(settings, pg_conn, unique):
    aggregate_type = f"rollback{unique}"
    with pytest.raises(RuntimeError):
        with pg_conn.transaction():
            insert_event(pg_conn, aggregate_type, "a-1", "Ghost", b"never")
            raise RuntimeError("business logic failed after the emit")
    with pg_conn.transaction():
        sentinel = insert_event(pg_conn, aggregate_type, "a-1", "Sentinel", b"after")

    # Same key, same partition: the rolled-back event would come before the sentinel.
    records = read_until(settings.kafka_bootstrap, f"outbox.event.{aggregate_type}", lambda rs: any(r.event_id == sentinel for r in rs))

    assert [r.event_id for r in records] == [sentinel]


def test_row_inserted_and_deleted_in_one_transaction_is_published_once(settings, admin_conn, unique):
    # The delete-in-transaction retention policy (`postbox db init --retention delete` grants the
    # app role DELETE); the default partitioned policy does not, so an owner connection plays the app.
    aggregate_type = f"delete{unique}"
    with admin_conn.transaction():
        event_id = insert_event(admin_conn, aggregate_type, "a-1", "Transient", b"kept in the WAL")
        admin_conn.execute("DELETE FROM postbox.outbox WHERE id = %s", (event_id,))

    records = read_until(settings.kafka_bootstrap, f"outbox.event.{aggregate_type}", lambda rs: len(rs) >= 1, linger=3)

    assert [r.event_id for r in records] == [event_id]
    assert records[0].value == b"kept in the WAL"
    leftover = admin_conn.execute("SELECT count(*) FROM postbox.outbox WHERE id = %s", (event_id,))
    assert leftover.fetchone()[0] == 0
