"""`postbox db init` as the admin managed PostgreSQL gives (RDS, Cloud SQL, Azure): not a superuser,
with CREATEROLE and REPLICATION, owner of its database. It sets the outbox up, or names the grant
that is missing and the statement that adds it, and changes nothing. Each test makes a fresh
database and admin role on the local stack's PostgreSQL and drops them after; the outbox roles are
the cluster's own (roles are cluster-wide), and their passwords are left as they are."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from postbox.database_url import database_url
from postbox.db import DatabaseInitError, init_database
from postbox.stack.stack import LocalStack

pytestmark = pytest.mark.integration


@dataclass
class Managed:
    admin: str  # the admin role's name
    database: str
    url: str  # the admin's connection to its database
    superuser_url: str  # the test's own, for setting up and checking


@pytest.fixture
def managed(admin_database_url: str) -> Iterator[Managed]:
    """A fresh database owned by a fresh CREATEROLE REPLICATION admin that is not a superuser."""
    token = uuid.uuid4().hex[:8]
    admin, database, password = f"mgd admin {token}", f"postbox_mgd_{token}", secrets.token_urlsafe(12)
    with psycopg.connect(admin_database_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN CREATEROLE REPLICATION NOSUPERUSER PASSWORD {}").format(
            sql.Identifier(admin), sql.Literal(password)))
        conn.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(database), sql.Identifier(admin)))
    port = LocalStack(locate_tools=False).ports.postgres
    try:
        yield Managed(admin, database, database_url(user=admin, password=password, port=port, dbname=database),
                      make_conninfo(admin_database_url, dbname=database))
    finally:
        with psycopg.connect(admin_database_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database)))
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(admin)))


def _as_superuser(managed: Managed, statement: sql.Composable) -> None:
    with psycopg.connect(managed.superuser_url, autocommit=True) as conn:
        conn.execute(statement)


def _outbox_exists(managed: Managed) -> bool:
    with psycopg.connect(managed.superuser_url, autocommit=True) as conn:
        return conn.execute("SELECT to_regclass('postbox.outbox') IS NOT NULL").fetchone() == (True,)


def test_a_createrole_replication_admin_sets_the_outbox_up(managed: Managed) -> None:
    lines = init_database(managed.url, app_password=None, cdc_password=None)
    assert any(line.startswith("created table postbox.outbox") for line in lines), lines
    assert any(line.startswith("created publication") for line in lines), lines
    assert init_database(managed.url, app_password=None, cdc_password=None) == ["nothing to change: the outbox is set up"]
    with psycopg.connect(managed.superuser_url, autocommit=True) as conn:
        owner = conn.execute("SELECT tableowner FROM pg_tables WHERE schemaname = 'postbox' AND tablename = 'outbox'").fetchone()
        assert owner == ("postbox_owner",)
        assert conn.execute("SELECT has_table_privilege('postbox_app', 'postbox.outbox', 'INSERT')").fetchone() == (True,)


def test_a_missing_create_on_the_database_is_named_with_its_grant(managed: Managed) -> None:
    _as_superuser(managed, sql.SQL("ALTER DATABASE {} OWNER TO postgres").format(sql.Identifier(managed.database)))
    _as_superuser(managed, sql.SQL("REVOKE CREATE ON DATABASE {} FROM PUBLIC").format(sql.Identifier(managed.database)))
    with pytest.raises(DatabaseInitError) as err:
        init_database(managed.url, app_password=None, cdc_password=None)
    grant = f'GRANT CREATE ON DATABASE {managed.database} TO "{managed.admin}"'
    assert f"may not create the schema and publication in database {managed.database!r}" in err.value.message
    assert grant in (err.value.fix or "")
    assert not _outbox_exists(managed)
    _as_superuser(managed, sql.SQL(grant))  # the fix, as given, is enough
    init_database(managed.url, app_password=None, cdc_password=None)
    assert _outbox_exists(managed)


def test_an_admin_without_createrole_is_told_to_join_postbox_owner(managed: Managed) -> None:
    _as_superuser(managed, sql.SQL("ALTER ROLE {} NOCREATEROLE").format(sql.Identifier(managed.admin)))
    with pytest.raises(DatabaseInitError) as err:
        init_database(managed.url, app_password=None, cdc_password=None)
    assert "is not a member of postbox_owner" in err.value.message
    fix = err.value.fix or ""
    assert f'GRANT postbox_owner TO "{managed.admin}"' in fix
    assert not _outbox_exists(managed)


def test_the_replication_role_s_password_needs_a_superuser_before_postgresql_16(managed: Managed) -> None:
    """PostgreSQL 15 lets only a superuser change anything of a REPLICATION role. The password is
    the one postbox_cdc has now (on 16+, where this admin may set it, nothing changes for Connect)."""
    with psycopg.connect(managed.superuser_url) as conn:
        version = conn.info.server_version
    current = LocalStack(locate_tools=False).secrets()["POSTBOX_CDC_PASSWORD"]
    if version >= 160000:
        pytest.skip("PostgreSQL 16+: a CREATEROLE admin with ADMIN OPTION on postbox_cdc may set its password")
    with pytest.raises(DatabaseInitError) as err:
        init_database(managed.url, app_password=None, cdc_password=current)
    assert f"PostgreSQL {version // 10000} lets only a superuser change the REPLICATION role postbox_cdc" in err.value.message
    assert "leave POSTBOX_CDC_PASSWORD unset" in (err.value.fix or "") and "\\password postbox_cdc" in (err.value.fix or "")
    assert not _outbox_exists(managed)
