"""#13.2 a real PostgreSQL login with a password holding @ : / % (and more), through a URL postbox built."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg import sql

from postbox.database_url import database_url, same_server_as
from postbox.settings import Settings
from postbox.stack.stack import LocalStack

pytestmark = pytest.mark.integration

PASSWORD = "p@ss:w/o%rd?#&= ü"


def test_login_with_an_odd_password_through_built_urls() -> None:
    stack = LocalStack(locate_tools=False)
    role = f"test_odd_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(stack.postgres.admin_url(), autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(role), sql.Literal(PASSWORD)))
    try:
        url = database_url(user=role, password=PASSWORD, port=stack.ports.postgres, params={"sslmode": "disable"})
        via_settings = Settings.load({"POSTBOX_DATABASE_URL": url}).database_url
        derived = same_server_as(stack.app_database_url() + "?sslmode=disable", user=role, password=PASSWORD)
        for candidate in (url, via_settings, derived):
            with psycopg.connect(candidate, connect_timeout=10) as conn:
                assert conn.execute("SELECT current_user").fetchone() == (role,)
                assert conn.info.get_parameters()["sslmode"] == "disable"
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            psycopg.connect(database_url(user=role, password=PASSWORD[:-1], port=stack.ports.postgres), connect_timeout=10)
    finally:
        with psycopg.connect(stack.postgres.admin_url(), autocommit=True) as admin:
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
