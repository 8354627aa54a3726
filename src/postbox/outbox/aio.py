"""The asyncio outbox writer, on a psycopg ``AsyncConnection``: :mod:`postbox.outbox.writer`'s API, awaited.

Planning (checks, encoding, the statements) is the same code as the sync writer's
(:class:`~postbox.outbox.core.OutboxCore`, where the API is documented once); only the sending is
awaited here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager, nullcontext
from typing import Any, Unpack

import psycopg
from psycopg import sql

from postbox.outbox.connection_lookup import ServiceConnection, async_connection, psycopg_only
from postbox.outbox.core import AggregateId, BatchPlan, EmitOptions, OutboxCore, TransactionHandle
from postbox.outbox.emit_cursor import async_emit_cursor
from postbox.outbox.records import EmittedEvent, NewEvent
from postbox.outbox.shared_connection import async_guard
from postbox.outbox.statements import Statement
from postbox.payloads.instance import EventPayload

AsyncConnection = psycopg.AsyncConnection[Any]


class AsyncOutbox(OutboxCore[AsyncConnection]):
    """Writes events into its pipeline's outbox (``postbox.outbox`` by default) on a psycopg ``AsyncConnection`` (see :class:`OutboxCore`)."""

    async def emit(self, conn: ServiceConnection, aggregate_type: str, aggregate_id: AggregateId, event_type: str,
                   payload: EventPayload, **options: Unpack[EmitOptions]) -> EmittedEvent:
        """Awaitable :meth:`Outbox.emit <postbox.outbox.writer.Outbox.emit>`: ``conn`` is a psycopg
        ``AsyncConnection`` or a SQLAlchemy ``AsyncSession``/``AsyncConnection``."""
        plan = self.plan_emit(aggregate_type, aggregate_id, event_type, payload, options)
        raw = conn if isinstance(conn, psycopg.AsyncConnection) else await async_connection(conn)
        await self._send(raw, plan.statements)
        return plan.events[0]

    async def emit_many(self, conn: ServiceConnection, events: Iterable[NewEvent]) -> list[EmittedEvent]:
        """Awaitable :meth:`Outbox.emit_many <postbox.outbox.writer.Outbox.emit_many>`."""
        plan = self.plan_many(events)
        raw = conn if isinstance(conn, psycopg.AsyncConnection) else await async_connection(conn)
        if len(plan):
            await self._send_batch(raw, plan)
        return plan.events

    async def execute_and_emit(self, conn: ServiceConnection, query: str | sql.Composable, params: Sequence[Any] | None,
                               aggregate_type: str, aggregate_id: AggregateId, event_type: str, payload: EventPayload,
                               **options: Unpack[EmitOptions]) -> tuple[psycopg.AsyncCursor[Any], EmittedEvent]:
        """Awaitable :meth:`Outbox.execute_and_emit <postbox.outbox.writer.Outbox.execute_and_emit>`."""
        conn = conn if isinstance(conn, psycopg.AsyncConnection) else await async_connection(conn)  # first: a Composable query is rendered with it
        text = query if isinstance(query, str) else query.as_string(conn)
        plan = self.plan_folded(text, params, aggregate_type, aggregate_id, event_type, payload, options)
        first, *more = plan.statements
        shared = async_guard(conn)
        shared.refuse_outsider()
        async with shared.lock:
            with self.sending(conn):
                shared.refuse_outsider()  # decides, under the lock
                async with conn.pipeline() if more else nullcontext():
                    cur = await conn.execute(*first, prepare=True)  # the caller reads its statement's results here
                    await self._execute(conn, more)
        return cur, plan.events[0]

    async def _send(self, conn: AsyncConnection, statements: list[Statement]) -> None:
        """Send ``statements`` in the caller's transaction, on the writer's own cursor, under the
        connection's send lock (:mod:`postbox.outbox.shared_connection`)."""
        shared = async_guard(conn)
        shared.refuse_outsider()
        async with shared.lock:
            with self.sending(conn):
                shared.refuse_outsider()  # decides, under the lock
                await self._send_unlocked(conn, statements)

    async def _send_unlocked(self, conn: AsyncConnection, statements: list[Statement]) -> None:
        async with conn.pipeline() if len(statements) > 1 else nullcontext():
            await self._execute(conn, statements)

    async def _send_batch(self, conn: AsyncConnection, plan: BatchPlan) -> None:
        """Awaitable :meth:`Outbox._send_batch <postbox.outbox.writer.Outbox._send_batch>`."""
        shared = async_guard(conn)
        shared.refuse_outsider()
        async with shared.lock:
            with self.sending(conn):
                shared.refuse_outsider()  # decides, under the lock
                if not plan.copies(conn):
                    await self._send_unlocked(conn, plan.statements_on(conn))
                    return
                cur = async_emit_cursor(conn)
                async with cur.copy(plan.copy_sql) as copy:
                    for piece in plan.batch.copy_pieces():
                        await copy.write(piece)
                await self._execute(conn, plan.after_copy())

    @staticmethod
    async def _execute(conn: AsyncConnection, statements: list[Statement]) -> None:
        if statements:
            cur = async_emit_cursor(conn)
            for statement in statements:
                await cur.execute(*statement, prepare=True)

    @asynccontextmanager
    async def transaction(
        self, conn: AsyncConnection | None = None, *, pipeline: bool = True
    ) -> AsyncIterator["AsyncOutboxTransaction"]:
        """Awaitable :meth:`Outbox.transaction <postbox.outbox.writer.Outbox.transaction>`."""
        if conn is not None:
            psycopg_only(conn, asynchronous=True)
        conn = conn if conn is not None else await self._own_connection()
        shared = async_guard(conn)
        shared.refuse_outsider()
        async with shared.lock:  # after any send in flight; refused if another block holds conn
            entered = shared.enter_block()
        try:
            async with conn.pipeline() if pipeline else nullcontext(), conn.transaction():
                yield AsyncOutboxTransaction(self, conn)
        finally:
            shared.leave_block(entered)

    async def _own_connection(self) -> AsyncConnection:
        conn = self._reusable_connection()
        if conn is None:
            conn = self._conn = await psycopg.AsyncConnection.connect(self._own_conninfo())
        return conn

    async def close(self) -> None:
        """Close the connection ``transaction()`` opened, if any."""
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

    async def __aenter__(self) -> "AsyncOutbox":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class AsyncOutboxTransaction(TransactionHandle[AsyncOutbox, AsyncConnection]):
    """The handle ``AsyncOutbox.transaction()`` yields: awaitable ``execute``, ``emit`` and ``emit_many``."""

    async def execute(self, query: Any, params: Any = None, **kwargs: Any) -> psycopg.AsyncCursor[Any]:
        """Awaitable :meth:`OutboxTransaction.execute <postbox.outbox.writer.OutboxTransaction.execute>`
        (refused to a task started outside the block, as ``emit`` is)."""
        shared = async_guard(self.connection)
        shared.refuse_outsider()
        async with shared.lock:  # tasks the block created take turns with its emits
            shared.check()
            return await self.connection.execute(query, params, **kwargs)

    async def emit(self, aggregate_type: str, aggregate_id: AggregateId, event_type: str, payload: EventPayload,
                   **options: Unpack[EmitOptions]) -> EmittedEvent:
        """Awaitable :meth:`OutboxTransaction.emit <postbox.outbox.writer.OutboxTransaction.emit>`."""
        return await self.outbox.emit(self.connection, aggregate_type, aggregate_id, event_type, payload, **options)

    async def emit_many(self, events: Iterable[NewEvent]) -> list[EmittedEvent]:
        """Awaitable :meth:`OutboxTransaction.emit_many <postbox.outbox.writer.OutboxTransaction.emit_many>`."""
        return await self.outbox.emit_many(self.connection, events)
