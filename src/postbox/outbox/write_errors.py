"""What a failed emit means to the application: the database errors the sync and async writers
translate into one :class:`~postbox.errors.OutboxError` with the fix, written once for both.

Only the exception path runs this module: an emit that succeeds never touches it.
"""

from __future__ import annotations

import psycopg

from postbox.errors import OutboxError
from postbox.outbox.policy import Retention
from postbox.pipelines import DEFAULT, Pipeline

#: The errors that say the database is not set up for this writer (anything else propagates as is).
SETUP_ERRORS = (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName, psycopg.errors.InsufficientPrivilege)


def setup_error(exc: psycopg.Error, user: str, retention: Retention, pipeline: Pipeline = DEFAULT) -> OutboxError:
    """The OutboxError for one of :data:`SETUP_ERRORS`: no outbox table of the writer's
    ``pipeline`` here, or a role that may not write it under ``retention`` (the grants `postbox db init
    --retention` sets)."""
    if isinstance(exc, psycopg.errors.InsufficientPrivilege):
        return OutboxError(
            f"role {user!r} may not write {pipeline.table} with retention {retention.value!r}: {exc.diag.message_primary}",
            fix="connect as postbox_app, and run `postbox db init --retention "
            f"{retention.value}{pipeline.flag}` so the grants match the writer's policy",
        )
    return OutboxError(
        f"the outbox table {pipeline.table} does not exist in this database ({exc.diag.message_primary})",
        fix=f"run `postbox db init --admin-url ...{pipeline.flag}` against it",
    )


__all__ = ["SETUP_ERRORS", "setup_error"]
