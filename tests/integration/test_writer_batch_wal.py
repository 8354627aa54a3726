"""#17 batch emit: one statement for a batch, and still one WAL record per event.

Debezium's PostgreSQL connector resumes after a restart from the LSN of the last event it
handed over; events that share one LSN (COPY writes a page of rows as one multi-insert record)
were skipped on resume (dbz#1554). ``emit_many`` sends a batch as one INSERT of unnested arrays,
so these tests read the WAL itself through a logical slot: every event of a batch must be a
change of its own LSN, in the order given. The COPY control proves the check can fail: the same
rows written by COPY do share LSNs on this server.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import psycopg
import pytest

from postbox.codec import AvroCodec
from postbox.outbox import NewEvent, Outbox
from postbox.outbox.uuid7 import uuid7
from postbox.schemas import SchemaRepository

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2024, 5, 6, 7, 8, 9, tzinfo=timezone.utc)


def placed(order_id: str) -> dict:
    return {"order_id": order_id, "customer_id": "c", "total_cents": 5, "placed_at": NOW,
            "items": [{"sku": "s", "quantity": 1, "unit_price_cents": 5}]}


@pytest.fixture
def codec_for(tmp_path: Path, unique: str) -> tuple[str, AvroCodec]:
    agg = f"w{unique}"
    shutil.copytree(ROOT / "schemas" / "order", tmp_path / agg)
    return agg, AvroCodec(SchemaRepository.load(tmp_path))


@pytest.fixture
def wal(admin_conn: psycopg.Connection, unique: str) -> Iterator["WalReader"]:
    """A temporary logical slot (test_decoding) of the admin session: what the WAL carries."""
    admin_conn.autocommit = True
    slot = f"wal_{unique}"
    admin_conn.execute("SELECT pg_create_logical_replication_slot(%s, 'test_decoding', true)", (slot,))
    yield WalReader(admin_conn, slot)
    admin_conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))


class WalReader:
    def __init__(self, conn: psycopg.Connection, slot: str) -> None:
        self.conn, self.slot = conn, slot

    def inserts_of(self, aggregate_type: str) -> list[tuple[str, str]]:
        """(lsn, event id) of every outbox INSERT of ``aggregate_type`` decoded so far, in WAL order."""
        rows = self.conn.execute(
            "SELECT lsn::text, data FROM pg_logical_slot_peek_changes(%s, NULL, NULL) WHERE data LIKE %s",
            (self.slot, f"table postbox.outbox%INSERT:%aggregate_type[%]:'{aggregate_type}'%"),  # [type]: a domain since #17
        ).fetchall()
        return [(lsn, data.split("id[uuid]:'", 1)[1][:36]) for lsn, data in rows]


def test_batch_events_are_one_wal_record_each_in_the_order_given(
    pg_conn: psycopg.Connection, wal: WalReader, codec_for: tuple[str, AvroCodec]
) -> None:
    agg, codec = codec_for
    events = [NewEvent(agg, f"a{i % 7}", "OrderPlaced", placed(str(i))) for i in range(1200)]
    with pg_conn.transaction():
        emitted = Outbox(codec=codec).emit_many(pg_conn, events)
    inserts = wal.inserts_of(agg)
    assert [event_id for _, event_id in inserts] == [str(e.id) for e in emitted]
    assert len({lsn for lsn, _ in inserts}) == len(emitted), "events of the batch share an LSN"


def test_control_copy_rows_share_lsns(admin_conn: psycopg.Connection, wal: WalReader, codec_for: tuple[str, AvroCodec]) -> None:
    """Without this, the test above could pass on a server that never shares LSNs."""
    agg, codec = codec_for
    body = codec.encode(agg, "OrderPlaced", placed("x"))
    with admin_conn.transaction():
        with admin_conn.cursor().copy(
            "COPY postbox.outbox (id, aggregate_type, aggregate_id, event_type, payload, created_at) FROM STDIN"
        ) as copy:
            for i in range(200):  # created_at given: its volatile default would disable COPY's multi-insert
                copy.write_row((uuid7(), agg, f"a{i}", "OrderPlaced", body, NOW))
    inserts = wal.inserts_of(agg)
    assert len(inserts) == 200
    assert len({lsn for lsn, _ in inserts}) < 200
