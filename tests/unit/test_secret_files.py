"""Every secret-bearing ``POSTBOX_*`` variable may come from the file ``<NAME>_FILE`` names (as
Docker and Kubernetes mount secrets), with clear errors naming the variable and the path for a
missing, unreadable or empty file, and for both forms set at once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from postbox.errors import ConfigError
from postbox.secret_env import SECRET_VARIABLES, env_source, env_value
from postbox.settings import Settings


def _secret(tmp_path: Path, text: str | bytes, name: str = "secret") -> Path:
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def test_settings_read_the_database_and_redis_urls_from_files(tmp_path):
    env = {
        "POSTBOX_DATABASE_URL_FILE": str(_secret(tmp_path, "postgresql://app:s3cret@db.internal:5432/shop\n", "db")),
        "POSTBOX_REDIS_URL_FILE": str(_secret(tmp_path, "rediss://consumer:pw@redis.internal:6380/0\n", "redis")),
    }
    settings = Settings.load(env)
    assert settings.database_url == "postgresql://app:s3cret@db.internal:5432/shop"
    assert settings.redis_url == "rediss://consumer:pw@redis.internal:6380/0"
    assert settings.sources["database_url"] == "POSTBOX_DATABASE_URL_FILE" and settings.sources["redis_url"] == "POSTBOX_REDIS_URL_FILE"
    assert "s3cret" not in repr(settings)


@pytest.mark.parametrize("name", SECRET_VARIABLES)
def test_every_secret_variable_has_its_file_form(tmp_path, name):
    env = {name + "_FILE": str(_secret(tmp_path, "value-of-" + name + "\n"))}
    assert env_value(name, env) == "value-of-" + name and env_source(name, env) == name + "_FILE"
    assert env_value(name, {name: "direct"}) == "direct" and env_source(name, {name: "direct"}) == name


def test_a_variable_that_carries_no_secret_has_no_file_form(tmp_path):
    assert env_value("POSTBOX_KAFKA_BOOTSTRAP", {"POSTBOX_KAFKA_BOOTSTRAP_FILE": str(_secret(tmp_path, "x:9092"))}) is None


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"), min_size=1).filter(str.strip))
def test_one_trailing_newline_is_dropped_and_nothing_else(text):
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        for ending in ("", "\n", "\r\n"):
            path = _secret(Path(folder), text + ending)
            assert env_value("POSTBOX_APP_PASSWORD", {"POSTBOX_APP_PASSWORD_FILE": str(path)}) == text


def test_both_forms_set_is_refused_naming_both(tmp_path):
    env = {"POSTBOX_REDIS_URL": "redis://a", "POSTBOX_REDIS_URL_FILE": str(_secret(tmp_path, "redis://b"))}
    with pytest.raises(ConfigError) as caught:
        Settings.load(env)
    assert "POSTBOX_REDIS_URL and POSTBOX_REDIS_URL_FILE" in str(caught.value)


@pytest.mark.parametrize(("make", "says"), [
    (lambda tmp: tmp / "absent", "does not exist"),
    (lambda tmp: tmp, "is a directory"),
    (lambda tmp: _secret(tmp, "\n"), "is empty"),
    (lambda tmp: _secret(tmp, b"\xff\xfe not utf-8"), "cannot read"),
], ids=["missing", "directory", "empty", "undecodable"])
def test_a_file_that_cannot_give_the_secret_names_the_variable_and_the_path(tmp_path, make, says):
    path = make(tmp_path)
    with pytest.raises(ConfigError) as caught:
        env_value("POSTBOX_DATABASE_URL", {"POSTBOX_DATABASE_URL_FILE": str(path)})
    assert "POSTBOX_DATABASE_URL_FILE" in str(caught.value) and str(path) in str(caught.value) and says in str(caught.value)


def test_the_cli_prints_the_error_and_its_fix(tmp_path):
    env = {**os.environ, "POSTBOX_REDIS_URL_FILE": str(tmp_path / "absent")}
    env.pop("POSTBOX_REDIS_URL", None)
    done = subprocess.run([sys.executable, "-m", "postbox", "lag", "--json"], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert f"POSTBOX_REDIS_URL_FILE names {tmp_path / 'absent'}, which does not exist" in done.stderr and "fix:" in done.stderr
