"""#13.1: schemas (and user Lua functions) are found through a setting naming their folder, never by
searching for a marker file; a consumer whose handlers name an event with no schema stops at start."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from postbox.consumer import App, ConsumerConfig
from postbox.consumer.reader_schemas import load_reader_codec
from postbox.errors import ConfigError
from postbox.outbox import Outbox
from postbox.resources import lua_functions_dir, schemas_dir

SCHEMA = {"type": "record", "name": "SignedUp", "fields": [{"name": "email", "type": "string"}]}


def _schemas(root: Path) -> Path:
    folder = root / "my-schemas"
    (folder / "user").mkdir(parents=True)
    (folder / "user" / "SignedUp.v1.avsc").write_text(json.dumps(SCHEMA))
    return folder


def test_the_setting_wins_over_the_working_directory(tmp_path, monkeypatch):
    folder = _schemas(tmp_path)
    (tmp_path / "schemas").mkdir()
    monkeypatch.chdir(tmp_path)
    assert schemas_dir(environ={"POSTBOX_SCHEMAS_DIR": str(folder)}) == folder.resolve()
    assert schemas_dir(folder, environ={"POSTBOX_SCHEMAS_DIR": "/elsewhere"}) == folder.resolve()
    assert schemas_dir(environ={}) == tmp_path / "schemas"


def test_without_setting_or_schemas_folder_the_error_names_the_setting(tmp_path, monkeypatch):
    (tmp_path / "sub").mkdir()
    (tmp_path / "schemas").mkdir()  # a parent's schemas/ is not searched for
    monkeypatch.chdir(tmp_path / "sub")
    with pytest.raises(ConfigError) as err:
        schemas_dir(environ={})
    assert "POSTBOX_SCHEMAS_DIR" in err.value.message and "POSTBOX_SCHEMAS_DIR" in err.value.fix


def test_a_setting_naming_a_missing_folder_is_a_configuration_error(tmp_path):
    with pytest.raises(ConfigError, match="POSTBOX_SCHEMAS_DIR=.*no such folder"):
        schemas_dir(environ={"POSTBOX_SCHEMAS_DIR": str(tmp_path / "nope")})
    with pytest.raises(ConfigError, match="POSTBOX_LUA_DIR=.*no such folder"):
        lua_functions_dir(environ={"POSTBOX_LUA_DIR": str(tmp_path / "nope")})
    with pytest.raises(ConfigError, match="schemas_dir="):
        Outbox(schemas_dir=tmp_path / "nope")
    with pytest.raises(ValueError, match="not both"):
        Outbox(schemas_dir=_schemas(tmp_path), codec=object())  # type: ignore[arg-type]


def test_lua_functions_load_only_from_the_folder_a_setting_names(tmp_path, monkeypatch):
    """Lua files in the working directory are never loaded by default: a consumer started from
    another folder (a shared /tmp, a checkout of someone else's branch) would run whatever
    ``consumers/lua/*.lua`` it finds there inside Redis with the consumer's rights."""
    monkeypatch.chdir(tmp_path)
    assert lua_functions_dir(environ={}) is None
    (tmp_path / "consumers" / "lua").mkdir(parents=True)
    (tmp_path / "consumers" / "lua" / "planted.lua").write_text("return redis.call('FLUSHALL')\n")
    assert lua_functions_dir(environ={}) is None
    other = tmp_path / "lua"
    other.mkdir()
    assert lua_functions_dir(environ={"POSTBOX_LUA_DIR": str(other)}) == other.resolve()


def test_the_writer_encodes_with_the_schemas_of_its_argument(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no ./schemas here: only the argument can work
    monkeypatch.delenv("POSTBOX_SCHEMAS_DIR", raising=False)
    row = Outbox(schemas_dir=_schemas(tmp_path)).rows.prepare("user", "u-1", "SignedUp", {"email": "a@example.com"})
    assert row.event.schema_version == 1


def _config(app: App, **flags: object) -> ConsumerConfig:
    return ConsumerConfig.load({}, app=app, **flags)


def test_a_handler_for_an_event_without_schema_stops_the_consumer_naming_the_file(tmp_path):
    folder = _schemas(tmp_path)
    app = App("g", schemas_dir=folder)

    @app.handler("user", "SignedUp")
    def signed_up(event, fx):  # pragma: no cover - never called
        pass

    @app.handler("user", "Deleted")
    def deleted(event, fx):  # pragma: no cover - never called
        pass

    with pytest.raises(ConfigError) as err:
        load_reader_codec(app, _config(app))
    assert str(folder / "user" / "Deleted.v1.avsc") in err.value.message
    assert "SignedUp" not in err.value.message.split("(expected")[1]


def test_wildcard_handlers_and_json_only_apps_need_no_schema_file(tmp_path):
    folder = _schemas(tmp_path)
    app = App("g", schemas_dir=folder)

    @app.handler("*", "Anything")
    def anything(event, fx):  # pragma: no cover - never called
        pass

    assert load_reader_codec(app, _config(app, topics="outbox.event.user")) is not None
    json_app = App("g", schemas_dir=folder, require_schemas=False)
    json_app.add("user", "Deleted", anything)
    assert load_reader_codec(json_app, _config(json_app)) is not None


def test_the_flag_wins_over_the_app_and_a_pinned_missing_version_is_refused(tmp_path):
    folder = _schemas(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    app = App("g", schemas_dir=empty, reader_versions={("user", "SignedUp"): 2})
    app.add("user", "SignedUp", lambda event, fx: None)
    with pytest.raises(ConfigError, match="SignedUp.v1.avsc"):
        load_reader_codec(app, _config(app))
    with pytest.raises(ConfigError, match="SignedUp.v2.avsc"):
        load_reader_codec(app, _config(app, schemas_dir=str(folder)))


def test_postbox_consume_exits_1_before_reading_a_record(tmp_path):
    """The CLI path: the message names the missing file; nothing needs Kafka or Redis to say so."""
    _schemas(tmp_path)
    (tmp_path / "service.py").write_text(textwrap.dedent("""
        from postbox.consumer import App

        app = App("signup-mailer")

        @app.handler("user", "SignedUp")
        def signed_up(event, fx):
            pass

        @app.handler("user", "PasswordReset")
        def reset(event, fx):
            pass
    """))
    env = {**os.environ, "POSTBOX_SCHEMAS_DIR": str(tmp_path / "my-schemas"),
           "POSTBOX_KAFKA_BOOTSTRAP": "127.0.0.1:1", "POSTBOX_REDIS_URL": "redis://127.0.0.1:1/0"}
    for check in ([], ["--check"]):
        done = subprocess.run([sys.executable, "-m", "postbox", "consume", "service:app", *check], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 1, done.stdout + done.stderr
        assert "user/PasswordReset.v1.avsc" in done.stdout + done.stderr


def test_the_consumer_says_which_schemas_folder_it_reads(tmp_path, monkeypatch, caplog):
    """Found as a new user: the start-up line showed ``schemas_dir=None`` (the unset setting) while
    the consumer read ``./schemas`` of the working directory; it now logs the folder it loaded."""
    (tmp_path / "schemas" / "user").mkdir(parents=True)
    (tmp_path / "schemas" / "user" / "SignedUp.v1.avsc").write_text(json.dumps(SCHEMA))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("POSTBOX_SCHEMAS_DIR", raising=False)
    app = App("g")
    app.add("user", "SignedUp", lambda event, fx: None)
    with caplog.at_level("INFO", logger="postbox.consumer"):
        load_reader_codec(app, _config(app))
    assert f"event schemas: 1 schema(s) in {tmp_path / 'schemas'}" in caplog.text
