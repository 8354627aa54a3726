"""Shared fixtures: one real stack per test session, tests isolated by unique prefixes.

The stack is the one `postbox up` started (CI runs `./dev.sh test`, which brings it up first);
endpoints come from the same POSTBOX_* settings users set. Integration tests never skip when a
service is missing: they fail, naming the service and the fix.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings as hypothesis_settings

from postbox.settings import Settings
from postbox.stack.addresses import local_stack_env

# The tests run as a user of the local stack who did `eval "$(postbox env)"`: the library never reads
# the stack's state folder (its passwords), so what the tests call directly finds them here. A
# variable already set (an external stack) wins.
for _name, _value in local_stack_env().items():
    os.environ.setdefault(_name, _value)
# The reference shop's Lua functions, named as a service names its own (nothing loads Lua files
# from the working directory by default).
os.environ.setdefault("POSTBOX_LUA_DIR", str(Path(__file__).resolve().parents[1] / "consumers" / "lua"))

# pytest-xdist's workers inherit COLUMNS=80 where a plain run has none, and the CLI's rich consoles
# keep the COLUMNS they find when postbox.cli.output is first imported: in-process CLI runs would be
# 80 columns wide under xdist only, whatever width a test asks for (tests/support/cli.py: 200).
os.environ.pop("COLUMNS", None)

# A test never asserts a duration: hypothesis' default 200 ms deadline per example fails property
# tests on a loaded 2-core machine (a first example paying for imports took 386 ms), so it is off.
hypothesis_settings.register_profile("postbox", deadline=None)
hypothesis_settings.load_profile("postbox")


@pytest.fixture(scope="session")
def settings() -> Settings:
    """The endpoints of the running stack (environment, else local-stack defaults)."""
    return Settings.load()


@pytest.fixture
def unique() -> str:
    """A short unique token for isolating topics, groups, aggregate types and Redis keys."""
    return uuid.uuid4().hex[:10]


@pytest.fixture(scope="session")
def admin_redis_url() -> str:
    """Redis as its admin (``default``) user for test set-up and checks the consumer user may not
    make: POSTBOX_ADMIN_REDIS_URL, else the local stack's. Consumers under test use settings.redis_url."""
    from postbox.stack.stack import admin_redis_url as url

    return url()


@pytest.fixture
def redis_client(admin_redis_url: str) -> Iterator["object"]:
    """A redis-py client on the stack's Redis as its admin user (bytes replies)."""
    import redis

    client = redis.Redis.from_url(admin_redis_url)
    try:
        client.ping()
    except redis.ConnectionError as exc:  # pragma: no cover - environment problem
        pytest.fail(f"Redis at POSTBOX_ADMIN_REDIS_URL is unreachable ({exc}); run `postbox up` first")
    yield client
    client.close()


@pytest.fixture
def pg_conn(settings: Settings) -> Iterator["object"]:
    """A psycopg connection as the application role (autocommit off)."""
    import psycopg

    try:
        conn = psycopg.connect(settings.database_url, connect_timeout=5)
    except psycopg.OperationalError as exc:  # pragma: no cover - environment problem
        pytest.fail(f"PostgreSQL at POSTBOX_DATABASE_URL is unreachable ({exc}); run `postbox up` first")
    yield conn
    conn.close()


@pytest.fixture(scope="session")
def admin_database_url() -> str:
    """A superuser/owner connection for checks the app role may not make (test-only).

    POSTBOX_ADMIN_DATABASE_URL for an external database; otherwise the local stack's private socket.
    """
    from postbox.stack.stack import admin_database_url as url

    return url()


@pytest.fixture
def admin_conn(admin_database_url: str) -> Iterator["object"]:
    import psycopg

    conn = psycopg.connect(admin_database_url, autocommit=True)
    yield conn
    conn.close()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run tests that restart shared services (marker `disruptive`) after all the others."""
    items.sort(key=lambda item: item.get_closest_marker("disruptive") is not None)
