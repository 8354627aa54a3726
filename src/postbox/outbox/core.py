"""What an emit does before it touches a connection, written once for the sync and async writers.

Why a sans-IO core: :class:`~postbox.outbox.writer.Outbox` (psycopg ``Connection``) and
:class:`~postbox.outbox.aio.AsyncOutbox` (``AsyncConnection``) must check, encode and send exactly
the same thing; the only difference is whether sending is awaited. So everything that decides what
is sent lives here and returns a :class:`Plan` (the statements and the events they write); the two
classes only send a plan, on their connection, in the caller's transaction.

The public API, the same on both classes (``AsyncOutbox``'s methods are awaited):

``emit(conn, aggregate_type, aggregate_id, event_type, payload, **options)``
    writes one event in ``conn``'s current transaction and returns it (:class:`EmittedEvent`: its
    id and topic). The payload is checked and encoded before any SQL (see :meth:`plan_emit`).
``emit_many(conn, events)``
    writes many events (:class:`NewEvent`) in order (see :meth:`plan_many`).
``execute_and_emit(conn, query, params, aggregate_type, aggregate_id, event_type, payload, **options)``
    runs the caller's statement with the event's INSERT folded into it and returns
    ``(cursor, event)``; the cursor holds the query's own results (see :meth:`plan_folded`).
``transaction(conn=None, *, pipeline=True)``
    one database transaction holding business statements and events; it commits when the block
    ends and rolls back if it raises. With ``pipeline=True`` the statements, the outbox INSERTs
    and the COMMIT travel together: psycopg spends one round trip on BEGIN and one on everything
    else, whatever the number of statements. Without ``conn`` it uses one connection the outbox
    opens itself (from ``conninfo``, else ``POSTBOX_DATABASE_URL``): use that form from one thread
    (or task) at a time, or give each thread its own with :meth:`OutboxCore.with_own_connection`.

``**options`` are :class:`EmitOptions`. Every emit refuses an autocommit connection outside a
transaction block (:mod:`postbox.outbox.transaction_check`), and turns "no outbox table here" or
"this role may not write it" into an :class:`~postbox.errors.OutboxError` with the fix.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Generic, NamedTuple, Self, TypeVar

import psycopg
from psycopg import pq

from postbox.codec.avro import AvroCodec
from postbox.outbox.batch import EncodedBatch
from postbox.outbox.policy import Retention
from postbox.outbox.records import AggregateId, EmitOptions, EmittedEvent, NewEvent
from postbox.outbox.rows import RowFactory
from postbox.outbox.binary_arrays import ByteaArray, TextArray, UuidArray
from postbox.outbox.statements import CHUNK_MAX_PAYLOAD_BYTES, CHUNK_MAX_ROWS, Statement, fold_into, statements_for
from postbox.outbox.table_statements import OutboxStatements, copy_statement, outbox_statements
from postbox.outbox.transaction_check import require_transaction
from postbox.outbox.write_errors import SETUP_ERRORS, setup_error
from postbox.payloads.instance import EventPayload
from postbox.pipelines import Pipeline

ConnT = TypeVar("ConnT", psycopg.Connection[Any], psycopg.AsyncConnection[Any])


class Plan(NamedTuple):
    """What one call writes: the statements to send in order (the first one's cursor is the
    caller's), and the events they write."""

    statements: list[Statement]
    events: list[EmittedEvent]


class OutboxCore(Generic[ConnT]):
    """Configuration and planning shared by ``Outbox`` and ``AsyncOutbox`` (the API: module docstring).

    One outbox is cheap, and thread-safe for emits on connections the caller passes. ``retention``
    decides whether an emit deletes its row again (``Retention``; default partitions).
    ``schemas_dir`` names the event schemas folder (default ``POSTBOX_SCHEMAS_DIR``, else
    ``./schemas``); ``codec`` instead hands over a loaded repository; ``encoding`` is "avro" or "json".
    ``pipeline`` names the outbox table written (:class:`~postbox.pipelines.Pipeline`; default
    ``POSTBOX_PIPELINE``, else the default pipeline's ``postbox.outbox``).
    """

    def __init__(
        self,
        conninfo: str | None = None,
        *,
        codec: AvroCodec | None = None,
        retention: Retention | str | None = None,
        encoding: str = "avro",
        schemas_dir: Path | str | None = None,
        pipeline: Pipeline | str | None = None,
    ) -> None:
        self.conninfo = conninfo
        self.retention = Retention.parse(retention)
        self.pipeline = Pipeline.parse(pipeline)
        self.statements = outbox_statements(self.pipeline)
        self.rows = RowFactory(codec, encoding=encoding, schemas_dir=schemas_dir)
        self._conn: ConnT | None = None

    # -- planning: everything before the first byte is sent ----------------------------------

    def plan_emit(self, aggregate_type: str, aggregate_id: AggregateId, event_type: str, payload: EventPayload,
                  options: EmitOptions) -> Plan:
        """One event: its payload checked and encoded, its id made (a bad payload raises here, so
        the caller's transaction is untouched); then one INSERT, plus its DELETE under the
        delete-in-transaction retention."""
        row = self.rows.prepare(aggregate_type, aggregate_id, event_type, payload, **options)
        return Plan(statements_for([row], self.retention, self.statements), [row.event])

    def plan_many(self, events: Iterable[NewEvent]) -> "BatchPlan":
        """Many events, in order: every event is validated and encoded before the first is sent
        (:mod:`postbox.outbox.batch`; a bad one raises naming its index, nothing sent).

        The batch goes as one binary COPY where the connection can take one (:meth:`BatchPlan.copies`),
        else as one INSERT of binary arrays per chunk of up to 5,000 events. Either way each event
        is its own WAL record with its own LSN, which Debezium before 3.7 needs:
        ``sql/copy_many.sql`` says how the COPY keeps it.
        """
        return BatchPlan(self.rows.encode_batch(events), self.retention, self.statements, copy_statement(self.pipeline))

    def plan_folded(self, query: str, params: Sequence[Any] | None, aggregate_type: str, aggregate_id: AggregateId,
                    event_type: str, payload: EventPayload, options: EmitOptions) -> Plan:
        """The caller's statement with the event's INSERT folded into it: one statement.

        ``query`` (one SELECT/INSERT/UPDATE/DELETE with positional placeholders) becomes
        ``WITH postbox_event AS (INSERT INTO postbox.outbox ...) <query>``, its parameters after
        the event's. The payload is checked before any SQL, as in :meth:`plan_emit`.
        """
        row = self.rows.prepare(aggregate_type, aggregate_id, event_type, payload, **options)
        return Plan(fold_into(query, params, row, self.retention, self.statements), [row.event])

    # -- sending: what both writers do around it ----------------------------------------------

    def sending(self, conn: ConnT) -> "Sending":
        """The guard every send runs in: the connection must be in the caller's transaction, and a
        database that is not set up for this writer raises OutboxError with the fix."""
        require_transaction(conn)
        return Sending(conn, self.retention, self.pipeline)

    # -- the connection ``transaction()`` opens itself ----------------------------------------

    def with_own_connection(self) -> Self:
        """This outbox's rows (codec, encoding, schemas) and retention with a connection of its
        own, for ``transaction()`` without a connection in another thread."""
        twin = copy.copy(self)
        twin._conn = None
        return twin

    def _reusable_connection(self) -> ConnT | None:
        """The connection opened before, while it is still usable."""
        conn = self._conn
        return None if conn is None or conn.closed or conn.broken else conn

    def _own_conninfo(self) -> str:
        if self.conninfo is not None:
            return self.conninfo
        from postbox.settings import Settings

        return Settings.load().database_url


#: The smallest batch sent as COPY: a COPY costs a round trip more than one INSERT (the server
#: answers the COPY statement before it takes rows), which a few events do not win back.
COPY_MIN_ROWS = 64


class BatchPlan:
    """What one ``emit_many`` writes, in the two forms it can take: one binary COPY of the rows
    (then the DELETE of the delete-in-transaction retention), or the INSERT statements.

    psycopg cannot COPY in pipeline mode, so the form is chosen on the connection, when it is
    sent (:meth:`copies`); the INSERT statements are only made when they are the form sent.
    """

    __slots__ = ("batch", "retention", "table", "copy_sql", "_statements")

    def __init__(self, batch: EncodedBatch, retention: Retention, table: OutboxStatements, copy_sql: str) -> None:
        self.batch = batch
        self.retention = retention
        self.table = table
        self.copy_sql = copy_sql
        self._statements: list[Statement] | None = None

    def __len__(self) -> int:
        return len(self.batch)

    @property
    def events(self) -> list[EmittedEvent]:
        """The events written, in order."""
        return self.batch.events()

    @property
    def statements(self) -> list[Statement]:
        """The INSERT form: one INSERT of unnested arrays per chunk (one single-row INSERT for
        one event), each followed by its DELETE under the delete-in-transaction retention."""
        if self._statements is None:
            rows = self.batch.rows() if len(self.batch) else []
            self._statements = statements_for(rows, self.retention, self.table) if rows else []
        return self._statements

    def statements_on(self, conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> list[Statement]:
        """The INSERT form as sent on ``conn``: its arrays cut from the encoded batch
        (:mod:`postbox.outbox.binary_arrays`) where ``conn`` reads the text as sent (as for
        :meth:`copies`), else :attr:`statements` (Python lists: psycopg encodes the text)."""
        batch = self.batch
        if len(batch) < 2 or not (batch.ascii or conn.info.encoding == "utf-8"):
            return self.statements
        out: list[Statement] = []
        for _start, _stop, (ids, types, keys, events, payloads, traces) in batch.arrays(CHUNK_MAX_ROWS, CHUNK_MAX_PAYLOAD_BYTES):
            id_array = UuidArray(ids)
            out.append((self.table.insert_many, (id_array, TextArray(types), TextArray(keys), TextArray(events),
                                                 ByteaArray(payloads), TextArray(traces))))
            if self.retention is Retention.DELETE:
                out.append((self.table.delete_many, (id_array,)))
        return out

    def copies(self, conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
        """Whether to send the COPY form on ``conn``: a batch large enough, a connection not in
        pipeline mode, and text it reads as sent (UTF-8, or a batch whose text is all ASCII)."""
        return (len(self.batch) >= COPY_MIN_ROWS and conn.pgconn.pipeline_status == pq.PipelineStatus.OFF
                and (self.batch.ascii or conn.info.encoding == "utf-8"))

    def after_copy(self) -> list[Statement]:
        """What follows the COPY: the DELETE of every row under the delete-in-transaction retention."""
        if self.retention is Retention.DELETE:
            return [(self.table.delete_many, (self.batch.event_ids(),))]
        return []


class Sending:
    """Context of one send: a setup error (no outbox table, a role without the grant) becomes the
    OutboxError of :mod:`postbox.outbox.write_errors`; anything else propagates as it is.

    A plain class rather than ``@contextmanager``: it runs on every emit, and costs less."""

    __slots__ = ("conn", "pipeline", "retention")

    def __init__(self, conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any], retention: Retention, pipeline: Pipeline) -> None:
        self.conn = conn
        self.retention = retention
        self.pipeline = pipeline

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if isinstance(exc, SETUP_ERRORS):
            raise setup_error(exc, self.conn.info.user, self.retention, self.pipeline) from exc


OutboxT = TypeVar("OutboxT")


class TransactionHandle(Generic[OutboxT, ConnT]):
    """What ``transaction()`` yields: its outbox and connection; the sync and async handles add
    ``execute``, ``emit`` and ``emit_many`` on that connection."""

    outbox: OutboxT
    connection: ConnT

    def __init__(self, outbox: OutboxT, conn: ConnT) -> None:
        self.outbox = outbox
        self.connection = conn


__all__ = ["COPY_MIN_ROWS", "AggregateId", "BatchPlan", "EmitOptions", "OutboxCore", "Plan", "Sending", "TransactionHandle"]
