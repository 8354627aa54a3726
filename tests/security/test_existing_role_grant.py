"""A service that logs in with its own role is granted the outbox with `postbox db grant --role`:
it can emit (INSERT, RETURNING id, doctor's check of undeliverable rows) and still cannot read,
change or delete other events, nor anything else. Every "cannot" is tried for real, as the role,
on the local stack. The role's name has quotes, spaces and a semicolon: it is quoted, never
spliced. A role that does not exist is refused with the statement that creates it."""

from __future__ import annotations

import secrets
import uuid

import psycopg
import pytest
from psycopg import sql

from postbox.db_roles import GrantError, grant_writer
from postbox.stack.stack import LocalStack
from tests.support.cli import invoke_json

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stack() -> LocalStack:
    return LocalStack(locate_tools=False)


@pytest.fixture
def service_role(stack: LocalStack):
    """A role the service already had: its own name (an odd one), its own password, no grants."""
    name = f'orders "svc"; drop {uuid.uuid4().hex[:6]}'
    password = secrets.token_urlsafe(12)
    with psycopg.connect(stack.postgres.admin_url(), autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(name), sql.Literal(password)))
    yield name, password
    with psycopg.connect(stack.postgres.admin_url(), autocommit=True) as admin:
        admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))  # its grants in this database
        admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def _as(stack: LocalStack, role: tuple[str, str]) -> psycopg.Connection:
    return psycopg.connect(host="127.0.0.1", port=stack.ports.postgres, dbname="postbox", user=role[0], password=role[1], autocommit=True)


INSERT = "INSERT INTO postbox.outbox (id, aggregate_type, aggregate_id, event_type, payload) VALUES (%s, 'lp', 'a', 'T', 'x')"


def test_before_the_grant_the_role_cannot_emit(stack, service_role):
    with _as(stack, service_role) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute(INSERT, (str(uuid.uuid4()),))


def test_the_granted_role_emits_and_can_do_nothing_more(stack, service_role):
    lines = grant_writer(stack.postgres.admin_url(), service_role[0])
    assert any(line.startswith("granted INSERT on postbox.outbox") for line in lines), lines
    with _as(stack, service_role) as conn:
        event_id = str(uuid.uuid4())
        row = conn.execute(INSERT + " RETURNING id", (event_id,)).fetchone()
        assert row is not None and str(row[0]) == event_id
        conn.execute("SELECT * FROM postbox.outbox_undeliverable(1)")  # postbox doctor, as this role
        for statement in (
            "SELECT payload FROM postbox.outbox LIMIT 1",
            "SELECT * FROM postbox.outbox LIMIT 1",
            "SELECT aggregate_id FROM postbox.outbox_default LIMIT 1",
            "UPDATE postbox.outbox SET payload = 'forged'",
            "DELETE FROM postbox.outbox",
            "TRUNCATE postbox.outbox",
            "CREATE TABLE postbox.sneaky (x int)",
            "ALTER PUBLICATION postbox_outbox SET (publish = 'insert, update')",
            "SELECT * FROM postbox.retention_checkpoints",
            "SET ROLE postbox_app",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)


def test_a_second_grant_changes_nothing(stack, service_role):
    grant_writer(stack.postgres.admin_url(), service_role[0])
    assert grant_writer(stack.postgres.admin_url(), service_role[0]) == [
        f"nothing to change: role {service_role[0]} already has the outbox writer's grants"]


def test_a_role_that_does_not_exist_is_refused_with_the_statement_that_creates_it(stack):
    name = f'no such "role" {uuid.uuid4().hex[:6]}'
    with pytest.raises(GrantError) as err:
        grant_writer(stack.postgres.admin_url(), name)
    assert f"role {name!r} does not exist" in err.value.message
    assert sql.Identifier(name).as_string() in (err.value.fix or "")  # the quoted name, ready to paste


def test_the_cli_grants_and_says_what_it_did(stack, service_role):
    report = invoke_json("db", "grant", "--role", service_role[0], "--admin-url", stack.postgres.admin_url())
    assert any("INSERT" in line for line in report["changes"])
    with _as(stack, service_role) as conn:
        conn.execute(INSERT, (str(uuid.uuid4()),))


def test_a_grant_on_a_pipeline_gives_its_outbox_and_not_the_default_one(stack, service_role):
    """`db grant --pipeline NAME`: a service writing its own pipeline's outbox gets that one only."""
    from psycopg.conninfo import make_conninfo

    from postbox.db import init_database
    from postbox.pipelines import Pipeline

    database = f"pbgrant{uuid.uuid4().hex[:8]}"
    admin_url = stack.postgres.admin_url()
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    admin = make_conninfo(admin_url, dbname=database)
    pipeline = Pipeline(f"g{uuid.uuid4().hex[:6]}")
    try:
        for names in (Pipeline.parse(None, environ={}), pipeline):
            init_database(admin, app_password=None, cdc_password=None, pipeline=names)
        lines = grant_writer(admin, service_role[0], pipeline=pipeline)
        assert any(line.startswith(f"granted INSERT on {pipeline.table}") for line in lines), lines
        own = make_conninfo(host="127.0.0.1", port=stack.ports.postgres, dbname=database, user=service_role[0], password=service_role[1])
        with psycopg.connect(own, autocommit=True) as conn:
            conn.execute(INSERT.replace("postbox.outbox", pipeline.table), (str(uuid.uuid4()),))
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(INSERT, (str(uuid.uuid4()),))
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database)))
