"""A first `postbox db init` on a cluster without the outbox's roles, as managed PostgreSQL's admin
(not a superuser; CREATEROLE, REPLICATION; owns its database). Before PostgreSQL 16 such an admin
may not create the REPLICATION role postbox_cdc: init says so with the statement that fixes it and
changes nothing; once the fix is applied, or where the provider's role rds_replication exists
(Amazon RDS), it sets everything up. On a private cluster of the test's own: roles are cluster-wide
and the shared stack's already exist."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

from postbox.database_url import database_url
from postbox.db import DatabaseInitError, init_database
from tests.support.private_postgres import private_postgres

pytestmark = pytest.mark.integration

ADMIN, PASSWORD = "cloud admin", "s3cret pw"


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """The private cluster's superuser URL, with a managed-style admin owning database ``shop``."""
    with private_postgres() as server:
        with psycopg.connect(server.admin_url(), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN CREATEROLE REPLICATION NOSUPERUSER PASSWORD {}").format(
                sql.Identifier(ADMIN), sql.Literal(PASSWORD)))
        yield server.admin_url()


@pytest.fixture
def shop(cluster: str) -> Iterator[tuple[str, str, int]]:
    """(admin URL, superuser URL of the database, server version) of a fresh database owned by the
    admin, on a cluster whose outbox roles are dropped again after the test."""
    with psycopg.connect(cluster, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE shop OWNER {}").format(sql.Identifier(ADMIN)))
        version = conn.info.server_version
        port = conn.execute("SHOW port").fetchone()[0]
    superuser = psycopg.conninfo.make_conninfo(cluster, dbname="shop")
    try:
        yield database_url(user=ADMIN, password=PASSWORD, port=port, dbname="shop"), superuser, version
    finally:
        with psycopg.connect(cluster, autocommit=True) as conn:
            conn.execute("DROP DATABASE shop WITH (FORCE)")
            for role in ("postbox_maint", "postbox_cdc", "postbox_app", "postbox_owner", "rds_replication"):
                conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def _role(superuser: str, name: str) -> tuple | None:
    with psycopg.connect(superuser, autocommit=True) as conn:
        return conn.execute("SELECT rolreplication, pg_has_role(oid, 'rds_replication', 'MEMBER') FROM pg_roles WHERE rolname = %s"
                            if _exists(conn, "rds_replication") else
                            "SELECT rolreplication, false FROM pg_roles WHERE rolname = %s", (name,)).fetchone()


def _exists(conn: psycopg.Connection, role: str) -> bool:
    return conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone() is not None


def test_without_a_way_to_create_postbox_cdc_init_names_the_fix_and_changes_nothing(shop) -> None:
    admin_url, superuser, version = shop
    if version >= 160000:
        pytest.skip("PostgreSQL 16+: an admin with REPLICATION may create a REPLICATION role")
    with pytest.raises(DatabaseInitError) as err:
        init_database(admin_url, app_password=None, cdc_password=None)
    assert f"PostgreSQL {version // 10000} lets only a superuser create the REPLICATION role postbox_cdc" in err.value.message
    fix = err.value.fix or ""
    assert "CREATE ROLE postbox_cdc LOGIN REPLICATION" in fix and 'GRANT rds_replication TO "cloud admin" WITH ADMIN OPTION' in fix
    with psycopg.connect(superuser, autocommit=True) as conn:
        assert not _exists(conn, "postbox_owner")  # one transaction: nothing was left behind
        conn.execute("CREATE ROLE postbox_cdc LOGIN REPLICATION")  # the fix, as a superuser
    lines = init_database(admin_url, app_password="app pw", cdc_password=None, maint_password="maint pw")
    assert "created role postbox_owner" in lines and "set the password of role postbox_app" in lines
    with psycopg.connect(superuser, autocommit=True) as conn:
        assert conn.execute("SELECT tableowner FROM pg_tables WHERE schemaname = 'postbox'"
                            " AND tablename = 'outbox'").fetchone() == ("postbox_owner",)


def test_on_rds_postbox_cdc_replicates_through_rds_replication(shop) -> None:
    admin_url, superuser, _ = shop
    with psycopg.connect(superuser, autocommit=True) as conn:  # what RDS has: the master user may grant it
        conn.execute("CREATE ROLE rds_replication NOLOGIN")
        conn.execute(sql.SQL("GRANT rds_replication TO {} WITH ADMIN OPTION").format(sql.Identifier(ADMIN)))
    lines = init_database(admin_url, app_password=None, cdc_password="cdc pw")
    assert "created role postbox_cdc" in lines and "set the password of role postbox_cdc" in lines
    assert _role(superuser, "postbox_cdc") == (False, True)
