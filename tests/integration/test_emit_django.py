"""Emit inside Django's ``transaction.atomic()`` (its PostgreSQL backend on psycopg 3), on the real database.

What a Django service relies on: ``outbox.emit(connection, ...)`` in an atomic block writes the
event in that block's transaction, so the row and the event commit together, and an exception in
the block, an inner atomic() (a savepoint) that fails, or ``set_rollback(True)`` take both with
them. Outside atomic() Django is in autocommit mode and every statement commits on its own: the
emit is refused with the fix, as on an autocommit psycopg connection, and nothing is written.
Before, ``outbox.emit(connection, ...)`` failed with a bare AttributeError.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from postbox.errors import NoTransactionError
from postbox.outbox import NewEvent, Outbox
from tests.integration.service_tables import Business, business  # noqa: F401 (a fixture)
from tests.support.django_project import django_connections

pytestmark = pytest.mark.integration

OUTBOX = Outbox(encoding="json")


@pytest.fixture
def django_db() -> Iterator[Any]:
    """``(connection, transaction)`` of a configured Django; the connection is closed after the test."""
    django_connections()
    from django.db import connection, transaction

    yield connection, transaction
    connection.close()


def test_atomic_commits_the_row_and_the_event_together(django_db: Any, business: Business, admin_conn: psycopg.Connection) -> None:
    connection, transaction = django_db
    with transaction.atomic():
        with connection.cursor() as cur:
            cur.execute(business.insert_sql(), ["kept"])
        OUTBOX.emit(connection, business.aggregate_type, "kept", "Happened", {"n": 1})
        OUTBOX.emit_many(connection, [NewEvent(business.aggregate_type, "kept", "Happened", {"n": 2})])
        assert business.committed(admin_conn, "kept") == (0, 0)
    assert business.committed(admin_conn, "kept") == (1, 2)


@pytest.mark.parametrize("path", ["exception", "savepoint", "set_rollback"])
def test_every_atomic_rollback_takes_row_and_event(django_db: Any, business: Business, admin_conn: psycopg.Connection, path: str) -> None:
    connection, transaction = django_db

    def write(row: str) -> None:
        with connection.cursor() as cur:
            cur.execute(business.insert_sql(), [row])
        OUTBOX.emit(connection, business.aggregate_type, row, "Happened", {"n": 1})

    if path == "exception":
        with pytest.raises(RuntimeError), transaction.atomic():
            write("lost")
            raise RuntimeError("the view fails after the emit")
    elif path == "savepoint":
        with transaction.atomic():
            write("kept")
            with pytest.raises(RuntimeError), transaction.atomic():  # a savepoint
                write("lost")
                raise RuntimeError("the nested step fails")
        assert business.committed(admin_conn, "kept") == (1, 1)
    else:
        with transaction.atomic():
            write("lost")
            transaction.set_rollback(True)
    assert business.committed(admin_conn, "lost") == (0, 0)


def test_outside_atomic_the_emit_is_refused_with_the_fix(django_db: Any, business: Business, admin_conn: psycopg.Connection) -> None:
    connection, _transaction = django_db
    with pytest.raises(NoTransactionError, match="autocommit") as info:
        OUTBOX.emit(connection, business.aggregate_type, "lost", "Happened", {"n": 1})
    assert "transaction.atomic()" in (info.value.fix or "")
    with connection.cursor() as cur:  # the connection is still usable (nothing was sent)
        cur.execute("SELECT 1")
    assert business.committed(admin_conn, "lost") == (0, 0)


def test_a_broken_atomic_block_is_refused_as_django_refuses_a_query(django_db: Any, business: Business, admin_conn: psycopg.Connection) -> None:
    """After a failed statement inside atomic() Django refuses every query until the block ends;
    an emit there gets Django's own error, not PostgreSQL's 'current transaction is aborted'."""
    from django.db import DatabaseError
    from django.db.transaction import TransactionManagementError

    connection, transaction = django_db
    with transaction.atomic():
        with connection.cursor() as cur:
            cur.execute(business.insert_sql(), ["lost"])
        with pytest.raises(DatabaseError), transaction.atomic(savepoint=False), connection.cursor() as cur:
            cur.execute("SELECT 1/0")  # caught, but the outer block is now marked for rollback
        with pytest.raises(TransactionManagementError):
            with connection.cursor() as cur:
                cur.execute("SELECT 1")
        with pytest.raises(TransactionManagementError):
            OUTBOX.emit(connection, business.aggregate_type, "lost", "Happened", {"n": 1})
    assert business.committed(admin_conn, "lost") == (0, 0)
