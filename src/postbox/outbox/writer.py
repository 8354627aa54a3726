"""The synchronous outbox writer (psycopg 3).

``emit`` runs inside the caller's transaction: it validates and encodes first (raising before any
SQL, so the transaction stays usable), then sends one INSERT. If the connection is in pipeline
mode the INSERT is queued with the caller's own statements and costs no round trip of its own;
:meth:`Outbox.transaction` sets that up for code that does not manage its own transaction.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from postbox.codec.avro import AvroCodec
from postbox.outbox.policy import Retention
from postbox.payloads.instance import EventPayload
from postbox.outbox.rows import EmittedEvent, NewEvent, RowFactory
from postbox.outbox.statements import Statement, fold_into, statements_for
from postbox.outbox.transaction_check import require_transaction
from postbox.outbox.write_errors import SETUP_ERRORS, setup_error


class Outbox:
    """Writes events into ``postbox.outbox`` on a psycopg connection.

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
        self._conn: psycopg.Connection[Any] | None = None

    # -- single events -----------------------------------------------------------------------

    def emit(
        self,
        conn: psycopg.Connection[Any],
        aggregate_type: str,
        aggregate_id: str | int | uuid.UUID,
        event_type: str,
        payload: EventPayload,
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
        self._send(conn, statements_for([row], self.retention))
        return row.event

    def emit_many(self, conn: psycopg.Connection[Any], events: Iterable[NewEvent]) -> list[EmittedEvent]:
        """Write many events in ``conn``'s current transaction, in order.

        Every event is validated and encoded before the first is sent. The batch goes as one
        INSERT of binary arrays per chunk of up to 5,000 events (one round trip), never COPY:
        each event stays its own WAL record, which Debezium needs (dbz#1554).
        """
        rows = self.rows.prepare_many(events)
        if rows:
            self._send(conn, statements_for(rows, self.retention))
        return [r.event for r in rows]

    def execute_and_emit(
        self,
        conn: psycopg.Connection[Any],
        query: str | sql.Composable,
        params: Sequence[Any] | None,
        aggregate_type: str,
        aggregate_id: str | int | uuid.UUID,
        event_type: str,
        payload: EventPayload,
        *,
        version: int | None = None,
        traceparent: str | None = None,
        event_id: uuid.UUID | None = None,
    ) -> tuple[psycopg.Cursor[Any], EmittedEvent]:
        """Run the caller's statement with the event's INSERT folded into it: one statement.

        ``query`` (one SELECT/INSERT/UPDATE/DELETE with positional placeholders) becomes
        ``WITH postbox_event AS (INSERT INTO postbox.outbox ...) <query>``; the returned cursor
        holds the query's own results. The payload is checked before any SQL, as in ``emit``.
        """
        row = self.rows.prepare(
            aggregate_type, aggregate_id, event_type, payload,
            version=version, traceparent=traceparent, event_id=event_id,
        )
        text = query if isinstance(query, str) else query.as_string(conn)
        cur = self._send(conn, fold_into(text, params, row, self.retention))
        return cur, row.event

    def _send(self, conn: psycopg.Connection[Any], statements: Sequence[Statement]) -> psycopg.Cursor[Any]:
        """Send ``statements`` in the caller's transaction; the cursor holds the first one's results."""
        require_transaction(conn)
        try:
            cur = conn.cursor()
            if len(statements) == 1:
                cur.execute(*statements[0], prepare=True)
                return cur
            with conn.pipeline():  # several statements travel together: one round trip
                cur.execute(*statements[0], prepare=True)
                with conn.cursor() as more:
                    for query, params in statements[1:]:
                        more.execute(query, params, prepare=True)
            return cur
        except SETUP_ERRORS as exc:
            raise setup_error(exc, conn.info.user, self.retention) from exc

    # -- unit of work --------------------------------------------------------------------------

    @contextmanager
    def transaction(
        self, conn: psycopg.Connection[Any] | None = None, *, pipeline: bool = True
    ) -> Iterator["OutboxTransaction"]:
        """One database transaction holding business statements and events.

        Commits when the block ends, rolls back if it raises. With ``pipeline=True`` (default)
        the statements, the outbox INSERTs and the COMMIT travel together: psycopg spends one
        round trip on BEGIN and one on everything else, whatever the number of statements.
        """
        conn = conn if conn is not None else self._own_connection()
        if pipeline:
            with conn.pipeline(), conn.transaction():
                yield OutboxTransaction(self, conn)
        else:
            with conn.transaction():
                yield OutboxTransaction(self, conn)

    def with_own_connection(self) -> "Outbox":
        """An Outbox with this one's rows (codec, encoding, schemas) and retention but a
        connection of its own, for ``transaction()`` without a connection in another thread."""
        twin = copy.copy(self)
        twin._conn = None
        return twin

    def _own_connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed or self._conn.broken:
            conninfo = self.conninfo
            if conninfo is None:
                from postbox.settings import Settings

                conninfo = Settings.load().database_url
            self._conn = psycopg.connect(conninfo)
        return self._conn

    def close(self) -> None:
        """Close the connection ``transaction()`` opened, if any."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> "Outbox":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class OutboxTransaction:
    """The handle ``Outbox.transaction()`` yields: run SQL and emit events in one transaction."""

    def __init__(self, outbox: Outbox, conn: psycopg.Connection[Any]) -> None:
        self.outbox = outbox
        self.connection = conn

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> psycopg.Cursor[Any]:
        """Run a business statement (fetching its rows syncs the pipeline, as in psycopg)."""
        return self.connection.execute(query, params, **kwargs)

    def emit(self, aggregate_type: str, aggregate_id: str | int | uuid.UUID, event_type: str,
             payload: EventPayload, **kwargs: Any) -> EmittedEvent:
        return self.outbox.emit(self.connection, aggregate_type, aggregate_id, event_type, payload, **kwargs)

    def emit_many(self, events: Iterable[NewEvent]) -> list[EmittedEvent]:
        return self.outbox.emit_many(self.connection, events)
