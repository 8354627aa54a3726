"""The asynchronous outbox writer (psycopg 3 AsyncConnection): the same API as writer.py, awaited.

``emit`` runs inside the caller's transaction: it validates and encodes first (raising before any
SQL, so the transaction stays usable), then sends one INSERT. If the connection is in pipeline
mode the INSERT is queued with the caller's own statements and costs no round trip of its own;
:meth:`Outbox.transaction` sets that up for code that does not manage its own transaction.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psycopg

from postbox.codec.avro import AvroCodec
from postbox.errors import OutboxError
from postbox.outbox.policy import Retention
from postbox.outbox.rows import DELETE_SQL, INSERT_SQL, EmittedEvent, Event, PreparedRow, RowFactory
from postbox.outbox.transaction_check import require_transaction


class AsyncOutbox:
    """Writes events into ``postbox.outbox`` on a psycopg AsyncConnection.

    One Outbox is cheap and thread-safe for ``emit``/``emit_many`` on connections the caller
    passes. ``transaction()`` without a connection uses one connection the Outbox opens itself
    (from ``conninfo``, else ``POSTBOX_DATABASE_URL``); use that form from one thread at a time.
    ``schemas_dir`` names the event schemas folder (default ``POSTBOX_SCHEMAS_DIR``, else
    ``./schemas``); ``codec`` instead hands over a loaded repository.
    """

    def __init__(
        self,
        conninfo: str | None = None,
        *,
        codec: AvroCodec | None = None,
        retention: Retention | str | None = None,
        encoding: str = "avro",
        schemas_dir: Path | str | None = None,
    ) -> None:
        self.conninfo = conninfo
        self.retention = Retention.parse(retention)
        self.rows = RowFactory(codec, encoding=encoding, schemas_dir=schemas_dir)
        self._conn: psycopg.AsyncConnection[Any] | None = None

    # -- single events -----------------------------------------------------------------------

    async def emit(
        self,
        conn: psycopg.AsyncConnection[Any],
        aggregate_type: str,
        aggregate_id: str | int | uuid.UUID,
        event_type: str,
        payload: Mapping[str, Any],
        *,
        version: int | None = None,
        traceparent: str | None = None,
        event_id: uuid.UUID | None = None,
    ) -> EmittedEvent:
        """Write one event in ``conn``'s current transaction; returns its id and topic."""
        row = self.rows.prepare(
            aggregate_type, aggregate_id, event_type, payload,
            version=version, traceparent=traceparent, event_id=event_id,
        )
        await self._send(conn, [row])
        return row.event

    async def emit_many(self, conn: psycopg.AsyncConnection[Any], events: Iterable[Event]) -> list[EmittedEvent]:
        """Write many events in ``conn``'s current transaction, in order, one INSERT each.

        Every event is validated and encoded before the first is sent. The INSERTs go through
        one pipeline (``executemany``), so a batch costs about one round trip, never a COPY or
        a multi-row INSERT (Debezium needs one insert per event, dbz#1554).
        """
        rows = [self.rows.prepare_event(e) for e in events]
        await self._send(conn, rows)
        return [r.event for r in rows]

    async def _send(self, conn: psycopg.AsyncConnection[Any], rows: Sequence[PreparedRow]) -> None:
        if not rows:
            return
        require_transaction(conn)
        try:
            async with conn.cursor() as cur:
                if len(rows) == 1:
                    await cur.execute(INSERT_SQL, rows[0].params)
                    if self.retention is Retention.DELETE:
                        await cur.execute(DELETE_SQL, (rows[0].event.id,))
                else:
                    await cur.executemany(INSERT_SQL, [r.params for r in rows])
                    if self.retention is Retention.DELETE:
                        await cur.executemany(DELETE_SQL, [(r.event.id,) for r in rows])
        except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName) as exc:
            raise OutboxError(
                f"the outbox table postbox.outbox does not exist in this database ({exc.diag.message_primary})",
                fix="run `postbox db init --admin-url ...` against it",
            ) from exc
        except psycopg.errors.InsufficientPrivilege as exc:
            user = conn.info.user
            raise OutboxError(
                f"role {user!r} may not write postbox.outbox with retention {self.retention.value!r}: {exc.diag.message_primary}",
                fix="connect as postbox_app, and run `postbox db init --retention "
                f"{self.retention.value}` so the grants match the writer's policy",
            ) from exc

    # -- unit of work --------------------------------------------------------------------------

    @asynccontextmanager
    async def transaction(
        self, conn: psycopg.AsyncConnection[Any] | None = None, *, pipeline: bool = True
    ) -> AsyncIterator["AsyncOutboxTransaction"]:
        """One database transaction holding business statements and events.

        Commits when the block ends, rolls back if it raises. With ``pipeline=True`` (default)
        the statements, the outbox INSERTs and the COMMIT travel together: psycopg spends one
        round trip on BEGIN and one on everything else, whatever the number of statements.
        """
        conn = conn if conn is not None else await self._own_connection()
        if pipeline:
            async with conn.pipeline(), conn.transaction():
                yield AsyncOutboxTransaction(self, conn)
        else:
            async with conn.transaction():
                yield AsyncOutboxTransaction(self, conn)

    async def _own_connection(self) -> psycopg.AsyncConnection[Any]:
        if self._conn is None or self._conn.closed or self._conn.broken:
            conninfo = self.conninfo
            if conninfo is None:
                from postbox.settings import Settings

                conninfo = Settings.load().database_url
            self._conn = await psycopg.AsyncConnection.connect(conninfo)
        return self._conn

    async def close(self) -> None:
        """Close the connection ``transaction()`` opened, if any."""
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

    async def __aenter__(self) -> "AsyncOutbox":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class AsyncOutboxTransaction:
    """The handle ``Outbox.transaction()`` yields: run SQL and emit events in one transaction."""

    def __init__(self, outbox: AsyncOutbox, conn: psycopg.AsyncConnection[Any]) -> None:
        self.outbox = outbox
        self.connection = conn

    async def execute(self, query: Any, params: Any = None, **kwargs: Any) -> psycopg.AsyncCursor[Any]:
        """Run a business statement (fetching its rows syncs the pipeline, as in psycopg)."""
        return await self.connection.execute(query, params, **kwargs)

    async def emit(self, aggregate_type: str, aggregate_id: str | int | uuid.UUID, event_type: str,
             payload: Mapping[str, Any], **kwargs: Any) -> EmittedEvent:
        return await self.outbox.emit(self.connection, aggregate_type, aggregate_id, event_type, payload, **kwargs)

    async def emit_many(self, events: Iterable[Event]) -> list[EmittedEvent]:
        return await self.outbox.emit_many(self.connection, events)
