"""#17.1: every emit goes through the writer's own cursor on the connection (outbox/emit_cursor.py).

One reused plain ``psycopg.Cursor`` per connection instead of ``conn.execute`` (a new cursor, two
Transformers and a dumper lookup per parameter on every emit). What a user relies on and these
tests check on the real database: the emit works whatever cursor class the caller configured (a
``RawCursor`` factory made every emit a server syntax error before, aborting the caller's
transaction), a failed emit leaves the connection's next transaction able to emit, threads
sharing a connection lose no event, and the cursor never keeps a dropped connection alive.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import uuid
import weakref
from typing import Any

import psycopg
import pytest

from postbox.outbox import AsyncOutbox, NewEvent, Outbox
from postbox.settings import Settings

pytestmark = pytest.mark.integration

FACTORIES = [psycopg.RawCursor, psycopg.ClientCursor, psycopg.Cursor]


def rows_with(admin_conn: psycopg.Connection, aggregate_id: str) -> int:
    return admin_conn.execute("SELECT count(*) FROM postbox.outbox WHERE aggregate_id = %s", (aggregate_id,)).fetchone()[0]


@pytest.mark.parametrize("factory", FACTORIES, ids=lambda f: f.__name__)
def test_emit_works_whatever_cursor_factory_the_connection_has(
    settings: Settings, admin_conn: psycopg.Connection, unique: str, factory: type
) -> None:
    """Before #17 a RawCursor factory sent ``VALUES (%b, ...)`` to the server: SyntaxError."""
    agg_id = f"cf-{factory.__name__}-{unique}"
    outbox = Outbox(encoding="json")
    with psycopg.connect(settings.database_url, cursor_factory=factory) as conn:
        with conn.transaction():
            outbox.emit(conn, "t17x1", agg_id, "Happened", {"n": 1})
            outbox.emit_many(conn, [NewEvent("t17x1", agg_id, "Happened", {"n": i}) for i in (2, 3)])
            # the caller's own statements still use the caller's cursor class
            assert type(conn.execute("SELECT 1")) is factory
    assert rows_with(admin_conn, agg_id) == 3


@pytest.mark.parametrize("factory", [psycopg.AsyncRawCursor, psycopg.AsyncClientCursor], ids=lambda f: f.__name__)
def test_async_emit_works_whatever_cursor_factory_the_connection_has(
    settings: Settings, admin_conn: psycopg.Connection, unique: str, factory: type
) -> None:
    agg_id = f"acf-{factory.__name__}-{unique}"

    async def run() -> None:
        outbox = AsyncOutbox(encoding="json")
        async with await psycopg.AsyncConnection.connect(settings.database_url, cursor_factory=factory) as conn:
            async with conn.transaction():
                await outbox.emit(conn, "t17x1", agg_id, "Happened", {"n": 1})
                await outbox.emit_many(conn, [NewEvent("t17x1", agg_id, "Happened", {"n": 2})])

    asyncio.run(run())
    assert rows_with(admin_conn, agg_id) == 2


@pytest.mark.parametrize("pipelined", [False, True], ids=["plain", "pipeline"])
def test_a_failed_emit_leaves_the_next_transaction_able_to_emit(
    settings: Settings, admin_conn: psycopg.Connection, unique: str, pipelined: bool
) -> None:
    """The database refuses the second row (same event id): that transaction rolls back, and the
    writer's cursor, reused by the next emit on the connection, still works."""
    agg_id = f"fail-{pipelined}-{unique}"
    outbox = Outbox(encoding="json")
    event_id = uuid.uuid4()
    with psycopg.connect(settings.database_url) as conn:
        with pytest.raises(psycopg.errors.UniqueViolation):
            with conn.pipeline() if pipelined else conn.transaction(), conn.transaction():
                outbox.emit(conn, "t17x1", agg_id, "Happened", {"n": 1}, event_id=event_id)
                outbox.emit(conn, "t17x1", agg_id, "Happened", {"n": 2}, event_id=event_id)
        with conn.transaction():
            outbox.emit(conn, "t17x1", agg_id, "Happened", {"n": 3})
    assert rows_with(admin_conn, agg_id) == 1


def test_threads_sharing_a_connection_lose_no_event(settings: Settings, admin_conn: psycopg.Connection, unique: str) -> None:
    """psycopg connections are thread-safe; the writer's one cursor per connection must be too."""
    agg_id = f"threads-{unique}"
    outbox = Outbox(encoding="json")
    errors: list[BaseException] = []

    def work(conn: psycopg.Connection[Any], worker: int) -> None:
        try:
            for i in range(150):
                outbox.emit(conn, "t17x1", agg_id, "Happened", {"worker": worker, "i": i})
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    with psycopg.connect(settings.database_url) as conn:
        threads = [threading.Thread(target=work, args=(conn, w)) for w in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        conn.commit()
    assert errors == []
    assert rows_with(admin_conn, agg_id) == 450


def test_the_writers_cursor_does_not_keep_a_connection_alive(settings: Settings) -> None:
    """The cursor is kept on its connection: a closed and dropped connection must still be freed
    (a cache keyed by the connection would keep every connection an app ever emitted on)."""
    outbox = Outbox(encoding="json")
    conn = psycopg.connect(settings.database_url)
    with conn.transaction(force_rollback=True):
        outbox.emit(conn, "t17x1", "gc", "Happened", {"n": 1})
    conn.close()
    ref = weakref.ref(conn)
    del conn
    gc.collect()
    assert ref() is None
