"""#17 batch emit: one statement for a batch, and still one WAL record per event.

Debezium's PostgreSQL connector before 3.7 resumed after a restart from the LSN of the last event
it handed over; events that share one LSN (COPY's multi-insert writes a page of rows as one WAL
record) were skipped on resume (dbz#1554). ``emit_many`` sends a large batch as one binary COPY,
which PostgreSQL writes one row at a time while a volatile expression is in play (the outbox's
``created_at`` default, and the statement's own ``WHERE clock_timestamp() IS NOT NULL``), and a
batch it cannot COPY as one INSERT of unnested arrays; these tests read the WAL itself through a
logical slot: every event of a batch must be a change of its own LSN, in the order given, in
either form, also on a table whose default would not keep it. The COPY controls prove the check
can fail: the same rows written by a COPY without either do share LSNs on this server.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from postbox.codec import AvroCodec
from postbox.db import init_database
from postbox.outbox import NewEvent, Outbox
from postbox.outbox.table_statements import copy_statement
from postbox.pipelines import DEFAULT
from postbox.outbox.uuid7 import uuid7
from postbox.schemas import SchemaRepository
from postbox.settings import Settings
from postbox.stack.stack import admin_database_url

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


@pytest.mark.parametrize("pipelined", [False, True], ids=["copy", "insert"])
def test_batch_events_are_one_wal_record_each_in_the_order_given(
    pg_conn: psycopg.Connection, wal: WalReader, codec_for: tuple[str, AvroCodec], pipelined: bool
) -> None:
    agg, codec = codec_for
    outbox = Outbox(codec=codec)
    events = [NewEvent(agg, f"a{i % 7}", "OrderPlaced", placed(str(i))) for i in range(1200)]
    with outbox.transaction(pg_conn, pipeline=pipelined) as tx:
        assert outbox.plan_many(events).copies(pg_conn) is not pipelined  # the form under test
        emitted = tx.emit_many(events)
    inserts = wal.inserts_of(agg)
    assert [event_id for _, event_id in inserts] == [str(e.id) for e in emitted]
    assert len({lsn for lsn, _ in inserts}) == len(emitted), "events of the batch share an LSN"


@pytest.fixture
def stable_default_db(unique: str) -> Iterator[tuple[str, str]]:
    """(admin URL, app URL) of a scratch database whose outbox's created_at defaults to now()
    (stable, not volatile: COPY's multi-insert is no longer ruled out by the table); dropped after."""
    name = f"postbox_w{unique}"
    with psycopg.connect(admin_database_url(), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    admin = make_conninfo(admin_database_url(), dbname=name)
    try:
        init_database(admin, app_password=None, cdc_password=None, retention="partitions")
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute("ALTER TABLE postbox.outbox ALTER COLUMN created_at SET DEFAULT now()")
        yield admin, make_conninfo(Settings.load().database_url, dbname=name)
    finally:
        with psycopg.connect(admin_database_url(), autocommit=True) as conn:
            conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = %s", (name,))
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def test_the_copy_keeps_one_wal_record_per_event_whatever_the_tables_default(
    stable_default_db: tuple[str, str], codec_for: tuple[str, AvroCodec], unique: str
) -> None:
    """The writer's COPY carries its own guarantee (a volatile WHERE), not only the table's default."""
    admin, app = stable_default_db
    agg, codec = codec_for
    with psycopg.connect(admin, autocommit=True) as admin_conn:
        admin_conn.execute("SELECT pg_create_logical_replication_slot(%s, 'test_decoding', true)", (f"wal_{unique}",))
        wal = WalReader(admin_conn, f"wal_{unique}")
        with psycopg.connect(app) as conn, conn.transaction():
            emitted = Outbox(codec=codec).emit_many(conn, [NewEvent(agg, f"a{i}", "OrderPlaced", placed(str(i))) for i in range(300)])
        inserts = wal.inserts_of(agg)
        assert [event_id for _, event_id in inserts] == [str(e.id) for e in emitted]
        assert len({lsn for lsn, _ in inserts}) == 300, "events of the batch share an LSN"
        # Control: on this table, the same COPY without the WHERE clause does share LSNs.
        body = codec.encode(agg, "OrderPlaced", placed("x"))
        with psycopg.connect(app) as conn, conn.transaction():
            with conn.cursor().copy(copy_statement(DEFAULT).split(" WHERE ")[0]) as copy:
                copy.set_types(["text", "text", "text", "uuid", "text", "bytea"])
                for i in range(300):
                    copy.write_row((agg + "x", "OrderPlaced", None, uuid7(), f"a{i}", body))
        assert len({lsn for lsn, _ in wal.inserts_of(agg + "x")}) < 300


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
