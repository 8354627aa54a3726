"""Emit on a connection taken from a psycopg_pool pool, sync and asyncio, on the real database.

What a service relies on: ``with pool.connection() as conn:`` commits when the block ends and
rolls back when it raises, and the event goes with the business row either way; a savepoint
(``conn.transaction()`` inside it) rolled back takes its row and event. The pool itself is no
transaction and is refused (tests/unit/test_emit_connection_types.py).
"""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from postbox.outbox import AsyncOutbox, Outbox
from postbox.settings import Settings
from tests.integration.service_tables import Business, business  # noqa: F401 (a fixture)

pytestmark = pytest.mark.integration

OUTBOX = Outbox(encoding="json")
ASYNC_OUTBOX = AsyncOutbox(encoding="json")


class Rolled(Exception):
    """The business logic failing after the emit."""


def test_pool_connection_commits_together_and_every_rollback_takes_both(settings: Settings, business: Business,
                                                                        admin_conn: psycopg.Connection) -> None:
    agg, insert = business.aggregate_type, business.insert_sql()
    with ConnectionPool(settings.database_url, min_size=1, max_size=2, open=True) as pool:
        with pool.connection() as conn:
            conn.execute(insert, ("kept",))
            OUTBOX.emit(conn, agg, "kept", "Happened", {"n": 1})
        with pytest.raises(Rolled), pool.connection() as conn:
            conn.execute(insert, ("lost",))
            OUTBOX.emit(conn, agg, "lost", "Happened", {"n": 1})
            raise Rolled()
        with pool.connection() as conn:
            conn.execute(insert, ("outer",))
            with pytest.raises(Rolled), conn.transaction():  # a savepoint
                conn.execute(insert, ("nested",))
                OUTBOX.emit(conn, agg, "nested", "Happened", {"n": 1})
                raise Rolled()
        with pool.connection() as conn:
            OUTBOX.emit(conn, agg, "rolled-back", "Happened", {"n": 1})
            conn.rollback()
    assert business.committed(admin_conn, "kept") == (1, 1)
    assert business.committed(admin_conn, "outer") == (1, 0)
    for lost in ("lost", "nested", "rolled-back"):
        assert business.committed(admin_conn, lost) == (0, 0), lost


def test_async_pool_connection_commits_together_and_rolls_back_together(settings: Settings, business: Business,
                                                                        admin_conn: psycopg.Connection) -> None:
    agg, insert = business.aggregate_type, business.insert_sql()

    async def scenario() -> None:
        async with AsyncConnectionPool(settings.database_url, min_size=1, max_size=2, open=False) as pool:
            async with pool.connection() as conn:
                await conn.execute(insert, ("kept",))
                await ASYNC_OUTBOX.emit(conn, agg, "kept", "Happened", {"n": 1})
            with pytest.raises(Rolled):
                async with pool.connection() as conn:
                    await conn.execute(insert, ("lost",))
                    await ASYNC_OUTBOX.emit(conn, agg, "lost", "Happened", {"n": 1})
                    raise Rolled()

    asyncio.run(scenario())
    assert business.committed(admin_conn, "kept") == (1, 1)
    assert business.committed(admin_conn, "lost") == (0, 0)
