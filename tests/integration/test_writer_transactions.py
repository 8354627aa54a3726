"""#12.11: ``emit`` refuses to commit an event on its own, sync and async, on the real database.

An autocommit connection outside a transaction block would commit the outbox INSERT alone; the
writer raises NoTransactionError before sending any SQL. Every form that does hold a transaction
(psycopg's ``transaction()``, pipelined or not, a business statement before the emit, autocommit
off) still writes, so the check never costs a legitimate caller anything.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from postbox.errors import NoTransactionError
from postbox.outbox import AsyncOutbox, NewEvent, Outbox
from postbox.settings import Settings

pytestmark = pytest.mark.integration


def rows_with(admin_conn: psycopg.Connection, aggregate_id: str) -> int:
    return admin_conn.execute("SELECT count(*) FROM postbox.outbox WHERE aggregate_id = %s", (aggregate_id,)).fetchone()[0]


def json_outbox() -> Outbox:
    return Outbox(encoding="json")


def test_autocommit_emit_outside_a_transaction_is_refused_and_writes_nothing(
    settings: Settings, admin_conn: psycopg.Connection, unique: str
) -> None:
    """#12.11 (sync): before the fix the INSERT committed on its own; now nothing is written."""
    agg_id = f"ac-{unique}"
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        with pytest.raises(NoTransactionError, match="autocommit") as info:
            json_outbox().emit(conn, "t12x11", agg_id, "Happened", {"n": 1})
        assert "conn.transaction()" in (info.value.fix or "")
        with pytest.raises(NoTransactionError):
            json_outbox().emit_many(conn, [NewEvent("t12x11", agg_id, "Happened", {"n": 2})])
        with pytest.raises(NoTransactionError), conn.pipeline():
            conn.execute("SELECT 1")  # queued: libpq says ACTIVE, yet no transaction block is open
            json_outbox().emit(conn, "t12x11", agg_id, "Happened", {"n": 3})
    assert rows_with(admin_conn, agg_id) == 0


@pytest.mark.parametrize("form", ["transaction", "pipeline", "statement-first", "outbox.transaction", "no-autocommit", "begin"])
def test_every_form_that_holds_a_transaction_still_writes(
    settings: Settings, admin_conn: psycopg.Connection, unique: str, form: str
) -> None:
    agg_id = f"{form}-{unique}"
    outbox = json_outbox()
    with psycopg.connect(settings.database_url, autocommit=form != "no-autocommit") as conn:
        if form == "transaction":
            with conn.transaction():
                outbox.emit(conn, "t12x11", agg_id, "Happened", {"n": 1})
        elif form == "pipeline":
            with conn.pipeline(), conn.transaction():
                outbox.emit(conn, "t12x11", agg_id, "Happened", {"n": 1})
        elif form == "statement-first":
            with conn.pipeline(), conn.transaction():
                conn.execute("SELECT 1")  # queued, so libpq reports ACTIVE rather than INTRANS
                outbox.emit(conn, "t12x11", agg_id, "Happened", {"n": 1})
        elif form == "outbox.transaction":
            with outbox.transaction(conn) as tx:  # pipelined: the business statement is queued first
                tx.execute("SELECT 1")
                tx.emit("t12x11", agg_id, "Happened", {"n": 1})
        elif form == "no-autocommit":
            outbox.emit(conn, "t12x11", agg_id, "Happened", {"n": 1})
            conn.commit()
        else:
            conn.execute("BEGIN")
            outbox.emit(conn, "t12x11", agg_id, "Happened", {"n": 1})
            conn.execute("COMMIT")
    assert rows_with(admin_conn, agg_id) == 1


def test_async_autocommit_emit_is_refused_and_transactions_still_write(
    settings: Settings, admin_conn: psycopg.Connection, unique: str
) -> None:
    """#12.11 (async): the same rule on psycopg's AsyncConnection."""
    refused, kept = f"async-ac-{unique}", f"async-tx-{unique}"

    async def scenario() -> Any:
        outbox = AsyncOutbox(encoding="json")
        conn = await psycopg.AsyncConnection.connect(settings.database_url, autocommit=True)
        async with conn:
            with pytest.raises(NoTransactionError):
                await outbox.emit(conn, "t12x11", refused, "Happened", {"n": 1})
            with pytest.raises(NoTransactionError):
                await outbox.emit_many(conn, [NewEvent("t12x11", refused, "Happened", {"n": 2})])
            async with conn.transaction():
                await outbox.emit(conn, "t12x11", kept, "Happened", {"n": 1})
            async with outbox.transaction(conn) as tx:
                await tx.execute("SELECT 1")
                await tx.emit("t12x11", kept, "Happened", {"n": 2})

    asyncio.run(scenario())
    assert rows_with(admin_conn, refused) == 0
    assert rows_with(admin_conn, kept) == 2
