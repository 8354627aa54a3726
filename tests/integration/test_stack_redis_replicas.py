"""`postbox up --redis-replicas 1`: a primary, a replica and three Sentinels a user can rehearse a
failover on, with the consumers' URL going through the Sentinels.

The Redis part of a stack is started in its own state folder on free ports (the shared stack is
not touched), by the same code `postbox up` and `postbox down` run: the group's start and stop.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis

from postbox.redis_client import connect
from postbox.stack.layout import StackLayout
from postbox.stack.nodes import init_all
from postbox.stack.ports import StackPorts
from postbox.stack.secrets import ensure_secrets
from postbox.stack.stack import LocalStack
from postbox.stack.topology import Topology
from tests.support.ports import free_run

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def replicated(tmp_path: Path):
    layout = StackLayout(tmp_path / "state")
    layout.ensure()
    ensure_secrets(layout.secrets_file)
    shared = StackPorts.from_env()
    ports = StackPorts(postgres=shared.postgres, redis=free_run(2, 10000, 15000), kafka=shared.kafka,
                       controller=shared.controller, connect=shared.connect, sentinel=free_run(3, 15000, 20000))
    stack = LocalStack(layout, ports, topology=Topology(redis_replicas=1))
    init_all(stack.redis_group.nodes)
    try:
        yield stack
    finally:
        stack.redis_group.stop()


def _wait(what: str, check, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            found = check()
        except redis.RedisError:
            found = None
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"{what} not within {timeout:.0f} s")


def _roles(stack: LocalStack) -> dict[str, str]:
    return {node["name"]: node["role"] for node in stack.redis_group.status()["nodes"]}


def test_a_replicated_redis_fails_over_and_the_consumers_url_follows(replicated):
    stack = replicated
    started = dict(stack.redis_group.start())
    assert started == {"redis": "started", "redis-2": "started", "sentinel-1": "started",
                       "sentinel-2": "started", "sentinel-3": "started"}
    primary, replica = stack.redis_group.nodes
    _wait("the replica in sync", lambda: _roles(stack) == {"redis": "primary", "redis-2": f"replica of 127.0.0.1:{primary.port}"})

    url = stack.env()["POSTBOX_REDIS_URL"]
    assert url.startswith("redis+sentinel://postbox_consumer:") and url.endswith(f"127.0.0.1:{stack.ports.sentinel + 2}/postbox/0")
    client = connect(url, socket_timeout=2)
    assert client.info("replication")["role"] == "master"
    assert client.info("server")["tcp_port"] == primary.port

    primary.kill()
    _wait("a Sentinel naming the replica", lambda: all(s["primary"] == replica.address for s in stack.redis_group.status()["sentinels"]))
    assert stack.redis_group.primary() is replica
    # The same client, not rebuilt: its next connection asks the Sentinels.
    assert _wait("the consumers' client on the promoted node", lambda: client.info("server")["tcp_port"] == replica.port)

    # `postbox down` then `up`: the killed node comes back as a replica of the promoted one.
    stack.redis_group.stop()
    assert (stack.layout.run / "redis-primary").read_text().strip() == "2"
    assert stack.status()["redis"]["state"] == "stopped"
    restarted = dict(stack.redis_group.start())
    assert restarted["redis-2"] == "started" and restarted["redis"] == "started"
    _wait("the old primary replicating the new one",
          lambda: _roles(stack) == {"redis": f"replica of 127.0.0.1:{replica.port}", "redis-2": "primary"})
    assert stack.redis_group.admin_url().endswith(f"{replica.address}/0")


def test_the_cli_settings_of_a_replicated_stack_go_through_the_sentinels(replicated, monkeypatch):
    from postbox.stack.addresses import local_stack_env

    stack = replicated
    stack.redis_group.start()
    monkeypatch.setenv("POSTBOX_STATE_DIR", str(stack.layout.root))
    monkeypatch.setenv("POSTBOX_REDIS_PORT", str(stack.ports.redis))
    found = local_stack_env()
    assert found["POSTBOX_REDIS_URL"] == stack.env()["POSTBOX_REDIS_URL"]
    assert connect(found["POSTBOX_REDIS_URL"], socket_timeout=2).ping()


def test_files_holding_the_replication_password_stay_the_owners_after_a_failover(replicated):
    """The Sentinels rewrite their own files and the nodes' start files on a failover; both hold the
    admin password (auth-pass, masterauth), so none may become readable by others."""
    stack = replicated
    stack.redis_group.start()
    primary, replica = stack.redis_group.nodes
    _wait("the replica in sync", lambda: _roles(stack)["redis-2"] == f"replica of 127.0.0.1:{primary.port}")
    primary.kill()
    _wait("a Sentinel naming the replica", lambda: stack.redis_group.status()["sentinels"][0]["primary"] == replica.address)
    stack.redis_group.start()  # the old primary back, as a replica: its start file rewritten by a Sentinel
    _wait("the old primary replicating", lambda: _roles(stack)["redis"] == f"replica of 127.0.0.1:{replica.port}")
    password = stack.secrets()["POSTBOX_REDIS_ADMIN_PASSWORD"]
    holding = [path for path in stack.layout.run.iterdir() if path.is_file() and password in path.read_text(errors="replace")]
    assert {p.name for p in holding} >= {"sentinel-1.conf", "redis.conf", "redis-2.conf"}
    for path in holding:
        assert path.stat().st_mode & 0o077 == 0, f"{path.name} is readable by others: {oct(path.stat().st_mode)}"


def test_doctor_names_each_redis_node_and_each_sentinel_and_warns_when_one_is_gone(replicated):
    import json

    from tests.support.cli import invoke

    stack = replicated
    stack.redis_group.start()
    primary, replica = stack.redis_group.nodes
    _wait("the replica in sync", lambda: _roles(stack)["redis-2"] == f"replica of 127.0.0.1:{primary.port}")
    url = stack.env()["POSTBOX_REDIS_URL"]

    def lines() -> dict[str, dict]:
        _, out = invoke("doctor", "--redis-url", url, "--json")  # its exit code is the other checks' too
        return {c["check"]: c for c in json.loads(out)["checks"]}

    def checks_ok() -> dict[str, dict] | None:
        found = lines()
        return found if found["redis nodes"]["status"] == "ok" and found["redis sentinels"]["status"] == "ok" else None

    found = _wait("doctor's node lines ok", checks_ok)
    assert f"primary with 1 replica(s): 127.0.0.1:{replica.port} online" in found["redis nodes"]["detail"]
    assert found["redis sentinels"]["detail"].startswith(f"3 of 3 Sentinel(s) name 127.0.0.1:{primary.port}")

    stack.redis_group.sentinels[2].kill()
    silent = lines()["redis sentinels"]
    assert silent["status"] == "warn" and f"silent: 127.0.0.1:{stack.ports.sentinel + 2}" in silent["detail"]
    assert "a failover needs a majority" in silent["fix"]
