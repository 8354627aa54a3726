"""`postbox up` fails early with the missing piece and its fix, not with a stack trace later."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from postbox.errors import StackError
from postbox.stack import prereqs
from postbox.stack.layout import StackLayout
from postbox.stack.redis_server import LocalRedis


def _fake_java(folder: Path, version_line: str) -> Path:
    java = folder / "java"
    java.write_text(f"#!/bin/sh\necho '{version_line}' >&2\n")
    java.chmod(0o755)
    return java


@pytest.fixture(autouse=True)
def no_system_jvms(monkeypatch, tmp_path):
    """This machine's /usr/lib/jvm stays out of the tests that do not build their own."""
    monkeypatch.setattr(prereqs, "JVM_ROOT", tmp_path / "no-jvm")


def test_no_java_at_all_names_java_17_and_the_install_command(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(StackError) as err:
        prereqs.find_java()
    assert "Java 17" in err.value.message
    assert "default-jre-headless" in err.value.fix


def test_an_old_java_on_path_does_not_hide_a_newer_installed_one(monkeypatch, tmp_path):
    """#13.3: any installed JRE >= 17 serves (Debian 12 ships 17, Ubuntu 24.04 21, vendors 25...)."""
    path_dir, jvm = tmp_path / "bin", tmp_path / "jvm"
    for folder in (path_dir, jvm / "java-21-openjdk" / "bin", jvm / "temurin-25-jdk" / "bin"):
        folder.mkdir(parents=True)
    _fake_java(path_dir, 'openjdk version "11.0.2" 2019-01-15')
    _fake_java(jvm / "java-21-openjdk" / "bin", 'openjdk version "21.0.5" 2024-10-15')
    _fake_java(jvm / "temurin-25-jdk" / "bin", 'openjdk version "25" 2025-09-16')
    monkeypatch.setenv("PATH", str(path_dir))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setattr(prereqs, "JVM_ROOT", jvm)
    java, version = prereqs.find_java()
    assert (java, version) == (jvm / "temurin-25-jdk" / "bin" / "java", 25)


def test_any_postgresql_from_14_serves_and_an_older_one_is_named(monkeypatch, tmp_path):
    for version in ("13", "16"):
        bin_dir = tmp_path / version / "bin"
        bin_dir.mkdir(parents=True)
        for name in ("postgres", "initdb"):
            (bin_dir / name).write_text("")
    monkeypatch.delenv("POSTBOX_PG_BIN", raising=False)
    monkeypatch.setattr(prereqs, "PG_ROOT", tmp_path)
    assert prereqs.find_pg_bin() == tmp_path / "16" / "bin"
    (tmp_path / "16" / "bin" / "postgres").unlink()
    with pytest.raises(StackError, match="newest PostgreSQL installed is 13; the local stack needs 14"):
        prereqs.find_pg_bin()


def test_too_old_java_is_refused_with_its_version(monkeypatch, tmp_path):
    _fake_java(tmp_path, 'openjdk version "11.0.2" 2019-01-15')
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(StackError) as err:
        prereqs.find_java()
    assert "Java 11" in err.value.message


def test_java_17_is_accepted(monkeypatch, tmp_path):
    _fake_java(tmp_path, 'openjdk version "17.0.15" 2025-04-15')
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    java, version = prereqs.find_java()
    assert version == 17 and java.parent == tmp_path


def test_missing_maven_and_redis_name_their_packages(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(StackError) as err:
        prereqs.find_maven()
    assert "maven" in err.value.fix


def test_a_taken_port_names_the_port_and_how_to_move(tmp_path):
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        redis = LocalRedis(StackLayout(tmp_path), Path("/usr/bin/redis-server"), port)
        with pytest.raises(StackError) as err:
            redis.start()
    assert f"port {port}" in err.value.message
    assert "POSTBOX_REDIS_PORT" in err.value.fix
