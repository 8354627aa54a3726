"""A service's own business table next to the outbox, for the tests that emit through the
frameworks a service holds its transaction with (SQLAlchemy, Django, psycopg_pool).

The table is made by the admin, as a service's migrations would, and the app role is granted what
the service does (SELECT, INSERT): the tests then look, from another connection, at what committed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import psycopg
import pytest
from psycopg import sql


class Business(NamedTuple):
    """One test's business table and the aggregate type its events carry."""

    table: str
    aggregate_type: str

    def insert_sql(self) -> str:
        """``INSERT INTO <table> (id) VALUES (%s)`` with the table quoted (psycopg placeholders)."""
        return sql.SQL("INSERT INTO {} (id) VALUES (%s)").format(sql.Identifier(self.table)).as_string(None)

    def committed(self, admin_conn: psycopg.Connection, row_id: str) -> tuple[int, int]:
        """(business rows with id ``row_id``, outbox events of this aggregate type with that
        aggregate id): what another connection sees committed."""
        rows = admin_conn.execute(sql.SQL("SELECT count(*) FROM {} WHERE id = %s").format(sql.Identifier(self.table)), (row_id,)).fetchone()
        events = admin_conn.execute("SELECT count(*) FROM postbox.outbox WHERE aggregate_type = %s AND aggregate_id = %s",
                                    (self.aggregate_type, row_id)).fetchone()
        return rows[0], events[0]


@pytest.fixture
def business(admin_conn: psycopg.Connection, unique: str) -> Iterator[Business]:
    """A business table the app role may read and write, dropped after the test."""
    found = Business(f"svc_rows_{unique}", f"svc{unique}")
    ident = sql.Identifier(found.table)
    admin_conn.execute(sql.SQL("CREATE TABLE {} (id text PRIMARY KEY)").format(ident))
    admin_conn.execute(sql.SQL("GRANT SELECT, INSERT ON {} TO postbox_app").format(ident))
    yield found
    admin_conn.execute(sql.SQL("DROP TABLE {}").format(ident))
