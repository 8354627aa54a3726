"""#12.7: rows the connector cannot deliver never enter the outbox, and old ones are named.

Measured on the local stack before the fix (plain SQL inserts, Debezium 3.7, Kafka 4.3): a row with
aggregate_type ``order items/x`` failed the connector task with "Error while attempting to describe
topics 'outbox.event.order items/x'"; a row with a 2,000,000-byte aggregate_id failed it with
RecordTooLargeException (max.request.size 1,048,576). Both times a valid row written right after
never reached Kafka, and `postbox connector restart` failed again on the same row: one bad row
stopped every event behind it. So:

- the writer refuses such rows before any SQL (``PayloadError`` naming the field);
- the outbox's column types (domains, #17) refuse them from any other writer, naming the column;
- the limits themselves are deliverable: a row exactly at every limit reaches Kafka;
- `postbox doctor` names rows that were already in a database before the constraint existed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from postbox.db import DatabaseInitError, init_database
from postbox.errors import PayloadError
from postbox.outbox import Outbox
from postbox.outbox.deliverable import MAX_AGGREGATE_TYPE, MAX_KEY_BYTES, RULED_COLUMNS
from postbox.settings import Settings
from postbox.topics import DLQ_SUFFIX, MAX_TOPIC_NAME, topic_for
from tests.support.kafka import read_until

pytestmark = pytest.mark.integration

INSERT_ROW = ("INSERT INTO postbox.outbox (id, aggregate_type, aggregate_id, event_type, payload, traceparent) "
              "VALUES (%s, %s, %s, %s, %s, %s)")

#: (what, aggregate_type, aggregate_id, event_type, the field the writer names)
UNDELIVERABLE = [
    ("space and slash in the type", "order items/x", "k-1", "Happened", "aggregate_type"),
    ("non-ASCII letter in the type", "ordér", "k-1", "Happened", "aggregate_type"),
    ("type one over the topic limit", "t" * (MAX_AGGREGATE_TYPE + 1), "k-1", "Happened", "aggregate_type"),
    ("2 MB key", "t12x7", "k" * 2_000_000, "Happened", "aggregate_id"),
    ("key one byte over, in multi-byte characters", "t12x7", "é" * (MAX_KEY_BYTES // 2) + "k", "Happened", "aggregate_id"),
    ("empty event type", "t12x7", "k-1", "", "event_type"),
    ("event type of 256 characters", "t12x7", "k-1", "E" * 256, "event_type"),
]


@pytest.mark.parametrize("what,aggregate_type,aggregate_id,event_type,field", UNDELIVERABLE, ids=[c[0] for c in UNDELIVERABLE])
def test_the_writer_refuses_what_the_connector_cannot_deliver(
    pg_conn: psycopg.Connection, admin_conn: psycopg.Connection, unique: str,
    what: str, aggregate_type: str, aggregate_id: str, event_type: str, field: str,
) -> None:
    marker = f"12x7-{unique}"
    with pytest.raises(PayloadError) as info, pg_conn.transaction():
        Outbox(encoding="json").emit(pg_conn, aggregate_type, aggregate_id, event_type, {"marker": marker})
    assert info.value.field == field
    assert "could never publish" in info.value.message
    assert admin_conn.execute("SELECT count(*) FROM postbox.outbox WHERE position(%s::bytea IN payload) > 0",
                              (marker.encode(),)).fetchone()[0] == 0


@pytest.mark.parametrize("what,aggregate_type,aggregate_id,event_type,field", UNDELIVERABLE, ids=[c[0] for c in UNDELIVERABLE])
def test_the_database_refuses_them_from_any_other_writer(
    pg_conn: psycopg.Connection, what: str, aggregate_type: str, aggregate_id: str, event_type: str, field: str,
) -> None:
    with pytest.raises(psycopg.errors.CheckViolation) as info, pg_conn.transaction():
        pg_conn.execute(INSERT_ROW, (uuid.uuid4(), aggregate_type, aggregate_id, event_type, b"{}", None))
    assert f'domain postbox.{field} violates check constraint "{field}_deliverable"' in str(info.value)


def test_a_traceparent_header_over_512_bytes_is_refused_by_the_database(pg_conn: psycopg.Connection) -> None:
    with pytest.raises(psycopg.errors.CheckViolation, match="traceparent_deliverable"), pg_conn.transaction():
        pg_conn.execute(INSERT_ROW, (uuid.uuid4(), "t12x7", "k", "E", b"{}", "0" * 513))


def test_a_row_at_every_limit_reaches_kafka(settings: Settings, pg_conn: psycopg.Connection, unique: str) -> None:
    """The limits are not arbitrary: the longest legal type and the largest key are delivered."""
    aggregate_type = (f"t12x7-{unique}-" + "x" * MAX_AGGREGATE_TYPE)[:MAX_AGGREGATE_TYPE]
    assert len(topic_for(aggregate_type) + DLQ_SUFFIX) == MAX_TOPIC_NAME
    key = "ключ" * (MAX_KEY_BYTES // len("ключ".encode()))
    key += "k" * (MAX_KEY_BYTES - len(key.encode()))
    assert len(key.encode()) == MAX_KEY_BYTES
    with pg_conn.transaction():
        emitted = Outbox(encoding="json").emit(pg_conn, aggregate_type, key, "E" * 255, {"n": 1})
    records = read_until(settings.kafka_bootstrap, emitted.topic, lambda rs: any(r.event_id == str(emitted.id) for r in rs), timeout=90)
    assert [r.key for r in records if r.event_id == str(emitted.id)] == [key.encode()]


def _back_to_text_columns(conn: psycopg.Connection) -> None:
    """The outbox's ruled columns as plain text again, their domains gone (a database set up before
    the rules existed)."""
    for column in RULED_COLUMNS:
        conn.execute(sql.SQL("ALTER TABLE postbox.outbox ALTER COLUMN {} TYPE text").format(sql.Identifier(column)))
        conn.execute(sql.SQL("DROP DOMAIN postbox.{}").format(sql.Identifier(column)))


#: The table CHECK of the previous release (a728b81's 050_deliverable.sql), before #17's domains.
PREVIOUS_CHECK = """ALTER TABLE postbox.outbox ADD CONSTRAINT outbox_deliverable CHECK (
        aggregate_type ~ '^[A-Za-z0-9._-]+$' AND length(aggregate_type) <= 232
    AND octet_length(aggregate_id) BETWEEN 1 AND 4096 AND length(event_type) BETWEEN 1 AND 255
    AND (traceparent IS NULL OR octet_length(traceparent) <= 512))"""

@pytest.fixture
def legacy_db(admin_database_url: str, settings: Settings, unique: str) -> Iterator[tuple[str, str, uuid.UUID]]:
    """A database set up before the constraint existed, holding one undeliverable row; then re-initialised."""
    name = f"postbox_t12x7{unique}"
    with psycopg.connect(admin_database_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    admin = make_conninfo(admin_database_url, dbname=name)
    bad_id = uuid.uuid4()
    try:
        init_database(admin, app_password=None, cdc_password=None)
        with psycopg.connect(admin, autocommit=True) as conn:  # the outbox as it was before #12.7
            _back_to_text_columns(conn)
            conn.execute(INSERT_ROW, (bad_id, "order items/x", "k", "Happened", b"{}", None))
        yield admin, settings.database_url.rsplit("/", 1)[0] + "/" + name, bad_id
    finally:
        with psycopg.connect(admin_database_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def test_init_on_an_existing_database_keeps_working_and_doctor_names_old_bad_rows(
    legacy_db: tuple[str, str, uuid.UUID],
) -> None:
    admin, app, bad_id = legacy_db
    lines = init_database(admin, app_password=None, cdc_password=None)
    assert any("NOT VALID" in line for line in lines), lines
    with psycopg.connect(admin, autocommit=True) as conn:  # new rows are refused already
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute(INSERT_ROW, (uuid.uuid4(), "a b", "k", "E", b"{}", None))
        conn.execute("SET ROLE postbox_owner")  # partitions can still be made while NOT VALID
        conn.execute("SELECT postbox.outbox_ensure_partitions('1 day', '30 days')").fetchall()
    env = {**os.environ, "POSTBOX_DATABASE_URL": app}
    done = subprocess.run([sys.executable, "-m", "postbox", "doctor", "--json"], check=False, capture_output=True, text=True, env=env, timeout=120)
    assert done.stdout.startswith("{"), done.stderr
    checks = {c["check"]: c for c in json.loads(done.stdout)["checks"]}
    assert checks["deliverable rows"]["status"] == "fail"
    assert str(bad_id) in checks["deliverable rows"]["detail"] and "order items/x" in checks["deliverable rows"]["detail"]
    assert done.returncode == 1
    with psycopg.connect(admin, autocommit=True) as conn:  # once the row is gone, init validates it
        conn.execute("DELETE FROM postbox.outbox WHERE id = %s", (bad_id,))
    assert any("validated" in line for line in init_database(admin, app_password=None, cdc_password=None))


def test_init_moves_the_previous_check_constraint_to_the_column_types(legacy_db: tuple[str, str, uuid.UUID]) -> None:
    """#17: a database of the previous version (text columns and the table CHECK outbox_deliverable,
    which PostgreSQL rebuilt on every INSERT) is migrated in place: its rows stay, the CHECK goes,
    and the columns' domains refuse what it refused."""
    admin, _app, bad_id = legacy_db
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("DELETE FROM postbox.outbox WHERE id = %s", (bad_id,))
        kept = uuid.uuid4()
        conn.execute(INSERT_ROW, (kept, "order", "k", "Happened", b"{}", None))
        conn.execute(PREVIOUS_CHECK)
    assert any("validated" in line for line in init_database(admin, app_password=None, cdc_password=None))
    with psycopg.connect(admin, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM pg_constraint WHERE conname = 'outbox_deliverable'").fetchone() == (0,)
        assert conn.execute("SELECT id FROM postbox.outbox").fetchall() == [(kept,)]
        with pytest.raises(psycopg.errors.CheckViolation, match="aggregate_id_deliverable"):
            conn.execute(INSERT_ROW, (uuid.uuid4(), "order", "", "Happened", b"{}", None))


def test_init_names_a_view_on_the_outbox_and_changes_nothing(legacy_db: tuple[str, str, uuid.UUID]) -> None:
    """Review of #17's in-place migration: a view on the outbox (a team's dashboard) makes PostgreSQL
    refuse to change a column's type. Found by review: `db init` said "cannot alter type of a column
    used by a view or rule" without naming the view, with the fix "connect as a superuser" given to
    a superuser. The error names the view and the way out; the failed init changes nothing."""
    admin, _app, bad_id = legacy_db
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("DELETE FROM postbox.outbox WHERE id = %s", (bad_id,))
        conn.execute(PREVIOUS_CHECK)
        conn.execute("CREATE VIEW public.outbox_recent AS SELECT id, aggregate_type, event_type FROM postbox.outbox")
    with pytest.raises(DatabaseInitError) as info:
        init_database(admin, app_password=None, cdc_password=None)
    text = str(info.value)
    assert "outbox_recent" in text and "recreate" in text and "superuser" not in text, text
    with psycopg.connect(admin, autocommit=True) as conn:  # rolled back: the previous layout as it was
        assert conn.execute("SELECT atttypid::regtype::text FROM pg_attribute WHERE attrelid = 'postbox.outbox'::regclass "
                            "AND attname = 'aggregate_type'").fetchone() == ("text",)
        assert conn.execute("SELECT count(*) FROM pg_constraint WHERE conname = 'outbox_deliverable' "
                            "AND conrelid = 'postbox.outbox'::regclass").fetchone() == (1,)
