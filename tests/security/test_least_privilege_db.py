"""Each database role can do its job and nothing more: every "cannot" is tried for real."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from postbox.stack.stack import LocalStack

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stack() -> LocalStack:
    return LocalStack(locate_tools=False)


def _connect(stack: LocalStack, role: str, secret: str) -> psycopg.Connection:
    password = stack.secrets()[secret]
    return psycopg.connect(
        host="127.0.0.1", port=stack.ports.postgres, dbname="postbox", user=role, password=password, autocommit=True
    )


@pytest.fixture
def app(stack):
    with _connect(stack, "postbox_app", "POSTBOX_APP_PASSWORD") as conn:
        yield conn


@pytest.fixture
def cdc(stack):
    with _connect(stack, "postbox_cdc", "POSTBOX_CDC_PASSWORD") as conn:
        yield conn


@pytest.fixture(scope="module")
def private_table(stack):
    """Another team's data in the same database, which neither role has any business reading."""
    with psycopg.connect(stack.postgres.admin_conninfo(), autocommit=True) as admin:
        admin.execute("CREATE SCHEMA IF NOT EXISTS payroll")
        admin.execute("CREATE TABLE IF NOT EXISTS payroll.salaries (name text, cents bigint)")
        admin.execute("INSERT INTO payroll.salaries VALUES ('ada', 1)")
    yield "payroll.salaries"
    with psycopg.connect(stack.postgres.admin_conninfo(), autocommit=True) as admin:
        admin.execute("DROP SCHEMA payroll CASCADE")


def _insert(conn: psycopg.Connection) -> str:
    event_id = str(uuid.uuid4())
    conn.execute(
        "INSERT INTO postbox.outbox (id, aggregate_type, aggregate_id, event_type, payload) VALUES (%s, 'lp', 'a', 'T', 'x')",
        (event_id,),
    )
    return event_id


def test_app_role_can_insert_events(app):
    _insert(app)


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE postbox.outbox SET payload = 'forged'",
        "SELECT payload FROM postbox.outbox LIMIT 1",
        "TRUNCATE postbox.outbox",
        "CREATE TABLE postbox.sneaky (x int)",
        "CREATE PUBLICATION sneaky FOR TABLE postbox.outbox",
        "ALTER PUBLICATION postbox_outbox SET (publish = 'insert, update')",
        "SELECT pg_drop_replication_slot('postbox_outbox')",
    ],
)
def test_app_role_cannot(app, statement):
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        app.execute(statement)


def test_app_role_cannot_read_other_schemas(app, private_table):
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        app.execute(f"SELECT * FROM {private_table}")


def test_cdc_role_has_replication_and_reads_the_outbox_only(cdc, private_table):
    row = cdc.execute("SELECT rolreplication, rolsuper, rolcreatedb, rolcreaterole FROM pg_roles WHERE rolname = current_user").fetchone()
    assert row == (True, False, False, False)
    cdc.execute("SELECT id FROM postbox.outbox LIMIT 1")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        cdc.execute(f"SELECT * FROM {private_table}")


@pytest.mark.parametrize(
    "statement",
    [
        "INSERT INTO postbox.outbox (id, aggregate_type, aggregate_id, event_type, payload) VALUES (gen_random_uuid(), 'x', 'x', 'x', 'x')",
        "DELETE FROM postbox.outbox",
        "CREATE TABLE postbox.sneaky (x int)",
        "CREATE PUBLICATION sneaky FOR TABLE postbox.outbox",
    ],
)
def test_cdc_role_cannot_write(cdc, statement):
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        cdc.execute(statement)


def test_app_role_can_insert_returning_the_event_id(app):
    """#13.2: stock producers write INSERT ... RETURNING id; the app role may read back its id."""
    event_id = str(uuid.uuid4())
    row = app.execute(
        "INSERT INTO postbox.outbox (id, aggregate_type, aggregate_id, event_type, payload) "
        "VALUES (%s, 'lp', 'a', 'T', 'x') RETURNING id",
        (event_id,),
    ).fetchone()
    assert row is not None and str(row[0]) == event_id


@pytest.mark.parametrize(
    "statement",
    [
        "INSERT INTO postbox.outbox (id, aggregate_type, aggregate_id, event_type, payload) "
        "VALUES (gen_random_uuid(), 'lp', 'a', 'T', 'x') RETURNING payload",
        "INSERT INTO postbox.outbox (id, aggregate_type, aggregate_id, event_type, payload) "
        "VALUES (gen_random_uuid(), 'lp', 'a', 'T', 'x') RETURNING *",
        "SELECT id, payload FROM postbox.outbox LIMIT 1",
        "SELECT aggregate_id, event_type FROM postbox.outbox LIMIT 1",
        "SELECT * FROM postbox.outbox LIMIT 1",
    ],
)
def test_returning_id_grants_no_read_of_other_columns(app, statement):
    """#13.2: the id column is readable for RETURNING; payloads and the rest stay refused."""
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        app.execute(statement)
