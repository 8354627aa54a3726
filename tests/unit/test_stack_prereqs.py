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


def test_no_java_at_all_names_java_17_and_the_install_command(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(StackError) as err:
        prereqs.find_java()
    assert "Java 17" in err.value.message
    assert "openjdk-17" in err.value.fix


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
