"""#17 ``execute_and_emit``: the event's INSERT folded into the caller's own statement.

What a user relies on: the business statement and the event commit or roll back together; the
statement's own results come back; a bad payload fails before any SQL (the transaction stays
usable); a query that starts with WITH still works; sync and async behave the same.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from postbox.codec import AvroCodec
from postbox.errors import PayloadError
from postbox.outbox import AsyncOutbox, Outbox
from postbox.schemas import SchemaRepository
from postbox.settings import Settings

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2024, 5, 6, 7, 8, 9, tzinfo=timezone.utc)


def placed(order_id: str) -> dict:
    return {"order_id": order_id, "customer_id": "c", "total_cents": 5, "placed_at": NOW,
            "items": [{"sku": "s", "quantity": 1, "unit_price_cents": 5}]}


@pytest.fixture
def setup(tmp_path: Path, unique: str, admin_conn: psycopg.Connection) -> Iterator[tuple[str, str, Outbox]]:
    """(aggregate type, business table, Outbox): a business table the app role may write."""
    agg, table = f"f{unique}", f"folded_orders_{unique}"
    shutil.copytree(ROOT / "schemas" / "order", tmp_path / agg)
    admin_conn.execute(sql.SQL("CREATE TABLE {} (id text PRIMARY KEY, total bigint NOT NULL)").format(sql.Identifier(table)))
    admin_conn.execute(sql.SQL("GRANT SELECT, INSERT ON {} TO postbox_app").format(sql.Identifier(table)))
    yield agg, table, Outbox(codec=AvroCodec(SchemaRepository.load(tmp_path)))
    admin_conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(table)))


def counts(admin_conn: psycopg.Connection, table: str, event_id: object) -> tuple[int, int]:
    business = admin_conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table))).fetchone()[0]
    events = admin_conn.execute("SELECT count(*) FROM postbox.outbox WHERE id = %s", (event_id,)).fetchone()[0]
    return business, events


def test_folded_statement_commits_both_returns_its_rows_and_rolls_back_both(
    pg_conn: psycopg.Connection, admin_conn: psycopg.Connection, setup: tuple[str, str, Outbox]
) -> None:
    agg, table, outbox = setup
    insert = sql.SQL("INSERT INTO {} (id, total) VALUES (%s, %s) RETURNING id, total").format(sql.Identifier(table))
    with pg_conn.transaction():
        cur, event = outbox.execute_and_emit(pg_conn, insert, ("o1", 42), agg, "o1", "OrderPlaced", placed("o1"))
        assert cur.fetchall() == [("o1", 42)]
    assert counts(admin_conn, table, event.id) == (1, 1)
    row = admin_conn.execute("SELECT aggregate_id, event_type FROM postbox.outbox WHERE id = %s", (event.id,)).fetchone()
    assert row == ("o1", "OrderPlaced") and event.topic == f"outbox.event.{agg}"

    with pytest.raises(RuntimeError, match="abort"):
        with pg_conn.transaction():
            _, lost = outbox.execute_and_emit(pg_conn, insert, ("o2", 1), agg, "o2", "OrderPlaced", placed("o2"))
            raise RuntimeError("abort")
    assert counts(admin_conn, table, lost.id) == (1, 0)


def test_bad_payload_fails_before_sql_and_a_leading_with_is_kept(
    pg_conn: psycopg.Connection, admin_conn: psycopg.Connection, setup: tuple[str, str, Outbox]
) -> None:
    agg, table, outbox = setup
    ident = sql.Identifier(table)
    with pg_conn.transaction():
        with pytest.raises(PayloadError, match="total_cents"):
            outbox.execute_and_emit(pg_conn, sql.SQL("INSERT INTO {} VALUES (%s, %s)").format(ident), ("bad", 1),
                                    agg, "bad", "OrderPlaced", {**placed("bad"), "total_cents": "five"})
        # nothing was sent: the transaction is usable, and a WITH query gets the event as its first CTE
        query = sql.SQL("WITH v(id, total) AS (VALUES (%s, %s::bigint)) INSERT INTO {} SELECT * FROM v RETURNING id").format(ident)
        cur, event = outbox.execute_and_emit(pg_conn, query, ("w1", 7), agg, "w1", "OrderPlaced", placed("w1"))
        assert cur.fetchone() == ("w1",)
    assert counts(admin_conn, table, event.id) == (1, 1)
    with pytest.raises(TypeError, match="sequence"):
        with pg_conn.transaction():
            outbox.execute_and_emit(pg_conn, "SELECT %(x)s", {"x": 1}, agg, "m", "OrderPlaced", placed("m"))


def test_async_folded_statement(admin_conn: psycopg.Connection, setup: tuple[str, str, Outbox]) -> None:
    agg, table, outbox = setup
    aout = AsyncOutbox(codec=outbox.rows.codec)

    async def run() -> object:
        async with await psycopg.AsyncConnection.connect(Settings.load().database_url) as aconn:
            async with aconn.transaction():
                query = sql.SQL("INSERT INTO {} VALUES (%s, %s) RETURNING total").format(sql.Identifier(table))
                cur, event = await aout.execute_and_emit(aconn, query, ("a1", 3), agg, "a1", "OrderPlaced", placed("a1"))
                assert await cur.fetchone() == (3,)
        return event.id

    assert counts(admin_conn, table, asyncio.run(run())) == (1, 1)
