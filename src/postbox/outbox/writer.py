"""The synchronous outbox writer (psycopg 3).

``emit`` runs inside the caller's transaction: it validates and encodes first (raising before any
SQL, so the transaction stays usable), then sends one INSERT. If the connection is in pipeline
mode the INSERT is queued with the caller's own statements and costs no round trip of its own;
:meth:`Outbox.transaction` sets that up for code that does not manage its own transaction.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

from postbox.codec.avro import AvroCodec
from postbox.errors import OutboxError
from postbox.outbox.policy import Retention
from postbox.outbox.rows import DELETE_SQL, INSERT_SQL, EmittedEvent, Event, PreparedRow, RowFactory
from postbox.outbox.transaction_check import require_transaction


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
        self._send(conn, [row])
        return row.event

    def emit_many(self, conn: psycopg.Connection[Any], events: Iterable[Event]) -> list[EmittedEvent]:
        """Write many events in ``conn``'s current transaction, in order, one INSERT each.

        Every event is validated and encoded before the first is sent. The INSERTs go through
        one pipeline (``executemany``), so a batch costs about one round trip, never a COPY or
        a multi-row INSERT (Debezium needs one insert per event, dbz#1554).
        """
        rows = [self.rows.prepare_event(e) for e in events]
        self._send(conn, rows)
        return [r.event for r in rows]

    def _send(self, conn: psycopg.Connection[Any], rows: Sequence[PreparedRow]) -> None:
        if not rows:
            return
        require_transaction(conn)
        try:
            with conn.cursor() as cur:
                if len(rows) == 1:
                    cur.execute(INSERT_SQL, rows[0].params)
                    if self.retention is Retention.DELETE:
                        cur.execute(DELETE_SQL, (rows[0].event.id,))
                else:
                    cur.executemany(INSERT_SQL, [r.params for r in rows])
                    if self.retention is Retention.DELETE:
                        cur.executemany(DELETE_SQL, [(r.event.id,) for r in rows])
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
             payload: Mapping[str, Any], **kwargs: Any) -> EmittedEvent:
        return self.outbox.emit(self.connection, aggregate_type, aggregate_id, event_type, payload, **kwargs)

    def emit_many(self, events: Iterable[Event]) -> list[EmittedEvent]:
        return self.outbox.emit_many(self.connection, events)
