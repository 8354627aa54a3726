"""The connection-string forms libpq reads work end to end: the settings take a socket URL and a
key=value string for the app role, and `postbox doctor` reaches the database through them. A
string that names no database gets a fix that says libpq used the user name. Before, the settings
refused both forms ("the URL names no host")."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from postbox.incident.doctor import _postgres
from postbox.pipelines import DEFAULT
from postbox.settings import Settings
from postbox.stack.stack import LocalStack

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stack() -> LocalStack:
    return LocalStack(locate_tools=False)


def _forms(stack: LocalStack) -> list[str]:
    password = stack.secrets()["POSTBOX_APP_PASSWORD"]
    socket_dir = conninfo_to_dict(stack.postgres.admin_url())["host"]
    port = stack.ports.postgres
    return [
        f"postgresql:///postbox?host={quote(socket_dir, safe='')}&port={port}&user=postbox_app&password={quote(password, safe='')}",
        make_conninfo("", host="127.0.0.1", port=port, dbname="postbox", user="postbox_app", password=password),
    ]


@pytest.mark.parametrize("form", [0, 1], ids=["socket-url", "key-value"])
def test_doctor_reaches_the_database_through_every_form(stack: LocalStack, form: int) -> None:
    settings = Settings.load({"POSTBOX_DATABASE_URL": _forms(stack)[form]})
    reachable = _postgres(settings, DEFAULT)[0]
    assert (reachable.name, reachable.status) == ("postgres reachable", "ok"), reachable
    assert reachable.detail.startswith("postbox_app@") and reachable.detail.endswith("/postbox")


def test_a_string_without_a_database_is_explained(stack: LocalStack) -> None:
    password = stack.secrets()["POSTBOX_APP_PASSWORD"]
    url = make_conninfo("", host="127.0.0.1", port=stack.ports.postgres, user="postbox_app", password=password)
    reachable = _postgres(Settings.load({"POSTBOX_DATABASE_URL": url}), DEFAULT)[0]
    assert reachable.status == "fail" and 'database "postbox_app" does not exist' in reachable.detail
    assert "names no database, so libpq used the user name (postbox_app)" in (reachable.fix or "")
