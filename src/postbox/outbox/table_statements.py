"""The writer's statements for one pipeline's outbox table, made once per pipeline.

The statements live in ``outbox/sql/`` written for ``{schema}.outbox`` (:mod:`postbox.pipelines`).
Each pipeline's texts are filled in once and kept, so an emit sends a constant string: psycopg
finds its prepared statement by that text, and the default pipeline's emit costs what it always did.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

from postbox.outbox.sql_text import sql_text
from postbox.pipelines import DEFAULT, Pipeline

_INSERT = sql_text("insert.sql")
_DELETE = sql_text("delete.sql")
_INSERT_MANY = sql_text("insert_many.sql")
_DELETE_MANY = sql_text("delete_many.sql")
_COPY_MANY = sql_text("copy_many.sql")


class OutboxStatements(NamedTuple):
    """The four statements an emit may send, for one outbox table."""

    insert: str
    delete: str
    insert_many: str
    delete_many: str


@functools.cache
def outbox_statements(pipeline: Pipeline) -> OutboxStatements:
    """``pipeline``'s statements (cached: one set per pipeline for the process)."""
    return OutboxStatements(pipeline.sql(_INSERT), pipeline.sql(_DELETE), pipeline.sql(_INSERT_MANY),
                            pipeline.sql(_DELETE_MANY))


@functools.cache
def copy_statement(pipeline: Pipeline) -> str:
    """``pipeline``'s COPY of a large batch (``sql/copy_many.sql``; cached as the others)."""
    return pipeline.sql(_COPY_MANY)


DEFAULT_STATEMENTS = outbox_statements(DEFAULT)

__all__ = ["DEFAULT_STATEMENTS", "OutboxStatements", "copy_statement", "outbox_statements"]
