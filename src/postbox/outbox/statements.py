"""What an emit sends: the SQL statements for prepared rows under a retention policy.

Shared by the sync and async writers so both send exactly the same statements. Why these:

* one event: one single-row INSERT (plus its DELETE under delete-in-transaction retention);
* a batch: one INSERT per chunk of rows, its columns sent as six binary arrays and unnested in
  order, so a batch costs one statement and one round trip instead of one statement per event
  (the per-statement work of psycopg and the server was most of a batch's time). Each row is
  still its own WAL record, which Debezium needs (see ``sql/insert_many.sql``). A large batch on
  a connection that can take one is a COPY instead (:class:`~postbox.outbox.core.BatchPlan`).

Every statement is sent with ``prepare=True``: the server parses and plans it once per
connection, from the first emit on, instead of after psycopg's default five executions.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from postbox.outbox.policy import Retention
from postbox.outbox.records import PreparedRow
from postbox.outbox.table_statements import DEFAULT_STATEMENTS, OutboxStatements

#: The default pipeline's batch statements (another pipeline's: :func:`outbox_statements`).
INSERT_MANY_SQL = DEFAULT_STATEMENTS.insert_many
DELETE_MANY_SQL = DEFAULT_STATEMENTS.delete_many

#: A chunk's bounds: large enough that a batch is a few statements, small enough that one
#: statement's parameters stay far below PostgreSQL's 1 GB limit per value and the server's memory.
CHUNK_MAX_ROWS = 5_000
CHUNK_MAX_PAYLOAD_BYTES = 32 * 1024 * 1024

Statement = tuple[str, tuple[Any, ...]]


def statements_for(rows: Sequence[PreparedRow], retention: Retention,
                   table: OutboxStatements = DEFAULT_STATEMENTS) -> list[Statement]:
    """The statements that write ``rows`` (in order) under ``retention`` into ``table`` (a
    pipeline's :func:`~postbox.outbox.table_statements.outbox_statements`)."""
    delete = retention is Retention.DELETE
    if len(rows) == 1:
        row = rows[0]
        single: list[Statement] = [(table.insert, row.params)]
        if delete:
            single.append((table.delete, (row.event.id,)))
        return single
    out: list[Statement] = []
    for chunk in _chunks(rows):
        out.append((table.insert_many, _columns(chunk)))
        if delete:
            out.append((table.delete_many, ([row.event.id for row in chunk],)))
    return out


def _chunks(rows: Sequence[PreparedRow]) -> Iterator[Sequence[PreparedRow]]:
    start, size = 0, 0
    for i, row in enumerate(rows):
        size += len(row.params[4])
        if i > start and (i - start >= CHUNK_MAX_ROWS or size > CHUNK_MAX_PAYLOAD_BYTES):
            yield rows[start:i]
            start, size = i, len(row.params[4])
    if start < len(rows):
        yield rows[start:]


def _columns(chunk: Sequence[PreparedRow]) -> tuple[list[Any], ...]:
    """The rows' parameters turned column-wise: one list (a SQL array) per outbox column."""
    return tuple(list(column) for column in zip(*(row.params for row in chunk)))


#: The name the outbox INSERT takes inside a folded statement (see :func:`fold_into`).
FOLDED_CTE = "postbox_event"
_LEADING_WITH = re.compile(r"\A\s*WITH(\s+RECURSIVE)?\s", re.IGNORECASE)


@functools.lru_cache(maxsize=256)
def _folded_text(query: str, insert_sql: str) -> str:
    """``query`` with the outbox INSERT as its first CTE; made once per query text (a caller runs
    the same few statements again and again, and psycopg then finds the same prepared statement)."""
    insert = f"{FOLDED_CTE} AS ({insert_sql})"
    match = _LEADING_WITH.match(query)
    if match:
        return f"{query[:match.end()]}{insert}, {query[match.end():]}"
    return f"WITH {insert} {query}"


def fold_into(query: str, params: Sequence[Any] | None, row: PreparedRow, retention: Retention,
              table: OutboxStatements = DEFAULT_STATEMENTS) -> list[Statement]:
    """The caller's statement with the outbox INSERT folded in as a data-modifying CTE.

    ``WITH postbox_event AS (INSERT INTO postbox.outbox ...) <query>``: PostgreSQL runs a
    data-modifying CTE exactly once and to completion whether or not the query reads it, so the
    event is written by the caller's own statement, in its transaction, with no statement of its
    own. A query that starts with ``WITH`` gets the event as its first CTE. Parameters must be
    positional (``%s``, ``%b``): the event's six come first. Under delete-in-transaction retention
    the DELETE follows as its own statement (a statement cannot see rows its own CTEs insert).
    """
    if isinstance(params, Mapping) or isinstance(params, (str, bytes)):
        raise TypeError(
            "execute_and_emit takes the query's parameters as a sequence (positional %s/%b placeholders), "
            f"not {type(params).__name__}: the event's parameters are placed before them"
        )
    out: list[Statement] = [(_folded_text(query, table.insert), (*row.params, *(params or ())))]
    if retention is Retention.DELETE:
        out.append((table.delete, (row.event.id,)))
    return out
