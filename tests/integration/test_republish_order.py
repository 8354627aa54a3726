"""`postbox db republish` keeps each aggregate's events in the order the database took them.

Ids are UUIDv7 from each writer's clock: with two hosts whose clocks are 250 ms apart, the later
event of an aggregate can carry the smaller id. Republishing in id order then sends that
aggregate's events to Kafka reversed. The database's own clock (``created_at``, set by
``clock_timestamp()`` at the insert) is one clock for every writer, so republish goes in that order.

The order Debezium would read is the WAL's: a ``test_decoding`` slot of the scratch database shows
it. Before the fix the re-inserted rows came out in id order (the skewed writer's event first).
"""

from __future__ import annotations

import re
import time
from datetime import timedelta

import psycopg
import pytest

from postbox.outbox.republish import republish
from postbox.outbox.uuid7 import uuid7
from tests.integration.test_retention_slot import scratch  # noqa: F401  (the fixture)

pytestmark = pytest.mark.integration
INSERT = "INSERT INTO postbox.outbox (id, aggregate_type, aggregate_id, event_type, payload) VALUES (%s, 'order', %s, 'E', '\\x00')"
WAL_ID = re.compile(r"INSERT: id\[uuid\]:'([0-9a-f-]{36})'")


def wal_insert_ids(admin: str, slot: str) -> list[str]:
    """The outbox ids inserted since the last call, in WAL order (consumes the slot's changes)."""
    with psycopg.connect(admin, autocommit=True) as conn:
        rows = conn.execute("SELECT data FROM pg_logical_slot_get_changes(%s, NULL, NULL)", (slot,)).fetchall()
    return [m.group(1) for (data,) in rows if (m := WAL_ID.search(data))]


def test_republish_follows_the_database_clock_not_the_writers_ids(scratch: tuple[str, str, str]) -> None:  # noqa: F811
    admin, maint, slot = scratch
    decoding = f"{slot}_wal"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'test_decoding')", (decoding,))
    try:
        now_ms = int(time.time() * 1000)
        ahead = uuid7(now_ms + 250)  # host A, clock 250 ms ahead, writes first ...
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(INSERT, (ahead, "42"))
            time.sleep(0.01)
            behind = uuid7(now_ms)  # ... host B, on time, writes the aggregate's next event
            conn.execute(INSERT, (behind, "42"))
            other = uuid7(now_ms - 100)  # another aggregate, older by both clocks
            conn.execute(INSERT, (other, "7"))
        assert behind < ahead
        assert wal_insert_ids(admin, decoding) == [str(ahead), str(behind), str(other)]

        report = republish(maint, batch=2)  # batches smaller than the table: order holds across them

        assert report.republished == 3
        assert wal_insert_ids(admin, decoding) == [str(ahead), str(behind), str(other)]
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (decoding,))


def test_republish_since_keeps_the_window_and_its_order(scratch: tuple[str, str, str]) -> None:  # noqa: F811
    admin, maint, slot = scratch
    decoding = f"{slot}_wal"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'test_decoding')", (decoding,))
    try:
        now_ms = int(time.time() * 1000)
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(INSERT, (uuid7(now_ms), "1"))
            time.sleep(0.05)
            start = conn.execute("SELECT clock_timestamp()").fetchone()[0]  # type: ignore[index]
            later = [uuid7(now_ms + 500 - 100 * i) for i in range(4)]  # ids going backwards
            for row_id in later:
                conn.execute(INSERT, (row_id, "2"))
        wal_insert_ids(admin, decoding)

        report = republish(maint, since=start - timedelta(microseconds=1), batch=3)

        assert report.republished == 4
        assert wal_insert_ids(admin, decoding) == [str(i) for i in later]
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (decoding,))
