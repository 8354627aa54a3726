"""The synchronous outbox writer, on a psycopg ``Connection``.

It only sends: what an emit checks and which statements it sends are decided by
:class:`~postbox.outbox.core.OutboxCore` (where the API is documented once), shared with the
asyncio writer. In pipeline mode an emit's INSERT is queued with the caller's own statements and
costs no round trip of its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any, Unpack

import psycopg
from psycopg import sql

from postbox.outbox.connection_lookup import ServiceConnection, psycopg_only, sync_connection
from postbox.outbox.core import AggregateId, BatchPlan, EmitOptions, OutboxCore, TransactionHandle
from postbox.outbox.emit_cursor import emit_cursor
from postbox.outbox.records import EmittedEvent, NewEvent
from postbox.outbox.shared_connection import guard
from postbox.outbox.statements import Statement
from postbox.payloads.instance import EventPayload

Connection = psycopg.Connection[Any]


class Outbox(OutboxCore[Connection]):
    """Writes events into its pipeline's outbox (``postbox.outbox`` by default) on a psycopg ``Connection`` (see :class:`OutboxCore`)."""

    def emit(self, conn: ServiceConnection, aggregate_type: str, aggregate_id: AggregateId, event_type: str,
             payload: EventPayload, **options: Unpack[EmitOptions]) -> EmittedEvent:
        """Write one event in ``conn``'s current transaction; returns its id and topic. ``conn`` is a
        psycopg ``Connection`` or what the service holds its transaction on (a SQLAlchemy Session,
        Django's connection: :mod:`postbox.outbox.connection_lookup`), looked up after the payload
        is checked."""
        plan = self.plan_emit(aggregate_type, aggregate_id, event_type, payload, options)
        self._send(sync_connection(conn), plan.statements)
        return plan.events[0]

    def emit_many(self, conn: ServiceConnection, events: Iterable[NewEvent]) -> list[EmittedEvent]:
        """Write many events in ``conn``'s current transaction, in order (:meth:`OutboxCore.plan_many`)."""
        plan = self.plan_many(events)
        raw = sync_connection(conn)
        if len(plan):
            self._send_batch(raw, plan)
        return plan.events

    def execute_and_emit(self, conn: ServiceConnection, query: str | sql.Composable, params: Sequence[Any] | None,
                         aggregate_type: str, aggregate_id: AggregateId, event_type: str, payload: EventPayload,
                         **options: Unpack[EmitOptions]) -> tuple[psycopg.Cursor[Any], EmittedEvent]:
        """Run ``query`` with the event's INSERT folded into it (:meth:`OutboxCore.plan_folded`);
        returns the cursor holding the query's results, and the event."""
        conn = sync_connection(conn)  # first: a Composable query is rendered with it
        text = query if isinstance(query, str) else query.as_string(conn)
        plan = self.plan_folded(text, params, aggregate_type, aggregate_id, event_type, payload, options)
        statements = plan.statements
        shared = guard(conn)
        shared.refuse_outsider()
        with shared.lock, self.sending(conn):
            shared.refuse_outsider()  # decides, under the lock
            if len(statements) == 1:  # the caller reads its statement's results on this cursor
                return conn.execute(*statements[0], prepare=True), plan.events[0]
            with conn.pipeline():  # and a DELETE (retention delete): one round trip
                cur = conn.execute(*statements[0], prepare=True)
                self._execute(conn, statements[1:])
        return cur, plan.events[0]

    def _send(self, conn: Connection, statements: list[Statement]) -> None:
        """Send ``statements`` in the caller's transaction, on the writer's own cursor, under the
        connection's send lock (:mod:`postbox.outbox.shared_connection`)."""
        shared = guard(conn)
        shared.refuse_outsider()
        with shared.lock, self.sending(conn):
            shared.refuse_outsider()  # decides, under the lock
            self._send_unlocked(conn, statements)

    def _send_unlocked(self, conn: Connection, statements: list[Statement]) -> None:
        if len(statements) == 1:
            emit_cursor(conn).execute(*statements[0], prepare=True)
        else:
            with conn.pipeline():  # several statements: one round trip
                self._execute(conn, statements)

    def _send_batch(self, conn: Connection, plan: BatchPlan) -> None:
        """Send a batch as :meth:`_send` sends statements, as one COPY where ``conn`` takes one
        (decided under the lock: :meth:`BatchPlan.copies`). The events returned are made while
        the server reads the rows (:meth:`~postbox.outbox.batch.EncodedBatch.copy_pieces`)."""
        shared = guard(conn)
        shared.refuse_outsider()
        with shared.lock, self.sending(conn):
            shared.refuse_outsider()  # decides, under the lock
            if not plan.copies(conn):
                self._send_unlocked(conn, plan.statements_on(conn))
                return
            cur = emit_cursor(conn)
            with cur.copy(plan.copy_sql) as copy:
                for piece in plan.batch.copy_pieces():
                    copy.write(piece)
            self._execute(conn, plan.after_copy())

    @staticmethod
    def _execute(conn: Connection, statements: list[Statement]) -> None:
        cur = emit_cursor(conn)
        for statement in statements:
            cur.execute(*statement, prepare=True)

    @contextmanager
    def transaction(self, conn: Connection | None = None, *, pipeline: bool = True) -> Iterator["OutboxTransaction"]:
        """One database transaction holding business statements and events: commits when the block
        ends, rolls back if it raises; pipelined unless ``pipeline=False`` (:mod:`postbox.outbox.core`)."""
        if conn is not None:
            psycopg_only(conn, asynchronous=False)
        conn = conn if conn is not None else self._own_connection()
        shared = guard(conn)
        shared.refuse_outsider()
        with shared.lock:  # after any send in flight; refused if another block holds conn
            entered = shared.enter_block()
        try:
            with conn.pipeline() if pipeline else nullcontext(), conn.transaction():
                yield OutboxTransaction(self, conn)
        finally:
            shared.leave_block(entered)

    def _own_connection(self) -> Connection:
        conn = self._reusable_connection()
        if conn is None:
            conn = self._conn = psycopg.connect(self._own_conninfo())
        return conn

    def close(self) -> None:
        """Close the connection ``transaction()`` opened, if any."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> "Outbox":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class OutboxTransaction(TransactionHandle[Outbox, Connection]):
    """The handle ``Outbox.transaction()`` yields: run SQL and emit events in one transaction."""

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> psycopg.Cursor[Any]:
        """Run a business statement (fetching its rows syncs the pipeline, as in psycopg).

        Refused with :class:`~postbox.errors.SharedConnectionError`, before any SQL, from code
        outside the block (a thread the handle was handed to), as :meth:`emit` is: the statement
        would join this block's transaction from a thread psycopg's pipeline cannot serve."""
        guard(self.connection).check()  # no lock: only this block's own code gets past the check
        return self.connection.execute(query, params, **kwargs)

    def emit(self, aggregate_type: str, aggregate_id: AggregateId, event_type: str, payload: EventPayload,
             **options: Unpack[EmitOptions]) -> EmittedEvent:
        """:meth:`Outbox.emit` on this transaction's connection."""
        return self.outbox.emit(self.connection, aggregate_type, aggregate_id, event_type, payload, **options)

    def emit_many(self, events: Iterable[NewEvent]) -> list[EmittedEvent]:
        """:meth:`Outbox.emit_many` on this transaction's connection."""
        return self.outbox.emit_many(self.connection, events)
