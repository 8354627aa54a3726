"""A quiet outbox in a busy database must not pin WAL: the connector's heartbeat (a logical
message emitted by the Debezium role) lets the slot's confirmed position follow the WAL."""

from __future__ import annotations

import time

import pytest

# disruptive (runs alone, after the tests that share the stack): waits for the stack's replication slot to catch up with the whole WAL.
pytestmark = [pytest.mark.integration, pytest.mark.disruptive]


def _slot_lag(admin_conn) -> int:
    row = admin_conn.execute(
        "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint FROM pg_replication_slots WHERE slot_name = 'postbox_outbox'"
    ).fetchone()
    assert row is not None, "the connector's replication slot is missing"
    return row[0]


def test_slot_follows_wal_written_by_other_tables(admin_conn, unique):
    table = f"public.noise_{unique}"
    admin_conn.execute(f"CREATE TABLE {table} (x text)")
    try:
        admin_conn.execute(f"INSERT INTO {table} SELECT repeat('x', 1000) FROM generate_series(1, 8000)")
        written = _slot_lag(admin_conn)
        assert written > 4_000_000  # the other table's writes are behind the slot right now

        deadline = time.monotonic() + 60  # heartbeat.interval.ms is 10 s
        lag = written
        while time.monotonic() < deadline and lag > 1_000_000:
            time.sleep(1)
            lag = _slot_lag(admin_conn)
        assert lag < 1_000_000, f"slot still {lag} bytes behind after a minute of heartbeats"
    finally:
        admin_conn.execute(f"DROP TABLE {table}")
