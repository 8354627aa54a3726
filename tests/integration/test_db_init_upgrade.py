"""Review of #17's in-place migration (`postbox db init` on a database of the previous layout: text
columns and the table CHECK ``outbox_deliverable``). A view on the outbox, as a team keeps for a
dashboard, makes PostgreSQL refuse to change a column's type. Found by review: `db init` then said
"cannot alter type of a column used by a view or rule" without naming the view, with the fix
"connect as a superuser" to a superuser. The error must name the view and say what to do, and the
failed init must change nothing."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from postbox.db import DatabaseInitError, init_database
from postbox.outbox.deliverable import RULED_COLUMNS

pytestmark = pytest.mark.integration

PREVIOUS_CHECK = """ALTER TABLE postbox.outbox ADD CONSTRAINT outbox_deliverable CHECK (
        aggregate_type ~ '^[A-Za-z0-9._-]+$' AND length(aggregate_type) <= 232
    AND octet_length(aggregate_id) BETWEEN 1 AND 4096 AND length(event_type) BETWEEN 1 AND 255
    AND (traceparent IS NULL OR octet_length(traceparent) <= 512))"""


@pytest.fixture
def previous_layout(admin_database_url: str, unique: str) -> Iterator[str]:
    """A database whose outbox has the previous release's layout (as a728b81's 050 made it)."""
    name = f"postbox_upg{unique}"
    with psycopg.connect(admin_database_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    admin = make_conninfo(admin_database_url, dbname=name)
    try:
        init_database(admin, app_password=None, cdc_password=None)
        with psycopg.connect(admin, autocommit=True) as conn:
            for column in RULED_COLUMNS:
                conn.execute(sql.SQL("ALTER TABLE postbox.outbox ALTER COLUMN {} TYPE text").format(sql.Identifier(column)))
                conn.execute(sql.SQL("DROP DOMAIN postbox.{}").format(sql.Identifier(column)))
            conn.execute(PREVIOUS_CHECK)
        yield admin
    finally:
        with psycopg.connect(admin_database_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def test_a_view_on_the_outbox_is_named_with_the_fix_and_nothing_changes(previous_layout: str) -> None:
    with psycopg.connect(previous_layout, autocommit=True) as conn:
        conn.execute("CREATE VIEW public.outbox_recent AS SELECT id, aggregate_type, event_type FROM postbox.outbox")
    with pytest.raises(DatabaseInitError) as info:
        init_database(previous_layout, app_password=None, cdc_password=None)
    text = str(info.value)
    assert "outbox_recent" in text, text
    assert "superuser" not in text, text
    assert "recreate" in text, text
    with psycopg.connect(previous_layout, autocommit=True) as conn:  # rolled back: the previous layout as it was
        types = conn.execute("SELECT atttypid::regtype::text FROM pg_attribute WHERE attrelid = 'postbox.outbox'::regclass "
                             "AND attname = 'aggregate_type'").fetchone()
        assert types == ("text",)
        assert conn.execute("SELECT count(*) FROM pg_constraint WHERE conname = 'outbox_deliverable' "
                            "AND conrelid = 'postbox.outbox'::regclass").fetchone() == (1,)
