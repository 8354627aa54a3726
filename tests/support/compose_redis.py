"""The Redis part of infra/docker-compose.replicas.yml, run without a container engine.

Why: no Docker engine runs here, and what makes the Sentinels' addresses right is run-time
behaviour (what each process announces, whether a replica logs in, what Sentinel rewrites).
In the compose file the Redis and Sentinel processes share one network namespace; here it is a
private one (``unshare -n``, root), so they listen on the compose file's own ports (6379, 6380,
26379-26381) without meeting the stack's. Each process is started by the project's entrypoint
script with its service's command line and environment from the merged files, as its container
would be. What only a container has is stood in for: each process's ``/tmp`` and
``/postbox-redis`` mount are folders of its own (the paths rewritten alike in the scripts and the
command line), and the image's ``docker-entrypoint.sh`` (which drops to the redis user) and
``chown`` are stubs that change nothing.

Run inside the namespace as ``python -m tests.support.compose_redis WORKDIR``: it rehearses a
failover through the consumer's ``redis+sentinel://`` URL (``postbox env --compose --replicas``)
and prints its evidence as one JSON line.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from tests.support import compose_files
from tests.support.child_process import LoggedChild

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
#: Passwords with what a config file's quoting must survive (a quote, a backslash, a space).
SECRETS = {"POSTBOX_REDIS_ADMIN_PASSWORD": 'ad"m\\in p@ss', "POSTBOX_REDIS_CONSUMER_PASSWORD": "p@ss:w/rd%",
           "POSTBOX_PG_SUPERUSER_PASSWORD": "su", "POSTBOX_APP_PASSWORD": "app", "POSTBOX_MAINT_PASSWORD": "maint",
           "POSTBOX_CDC_PASSWORD": "cdc"}
SERVICES = ("redis", "redis-replica", "sentinel-1", "sentinel-2", "sentinel-3")


class Container(LoggedChild):
    """One service's process, in a folder that stands for its container's filesystem."""

    def __init__(self, work: Path, name: str, service: dict[str, Any]) -> None:
        self.name = name
        self.dir = work / name
        self.tmp, self.mount, self.data = self.dir / "tmp", self.dir / "postbox-redis", self.dir / "data"
        self.service = service
        self.process: subprocess.Popen[bytes] | None = None

    def _paths(self, text: str) -> str:
        """The container's paths moved into its folder (one pass: the folder may itself be under /tmp)."""
        return re.sub(r"/postbox-redis|/tmp/", lambda m: str(self.mount) if m.group() == "/postbox-redis" else f"{self.tmp}/", text)

    def start(self) -> None:
        """First start: a fresh filesystem; a later one keeps it (a restarted container)."""
        if not self.dir.exists():
            for folder in (self.tmp, self.data, self.mount):
                folder.mkdir(parents=True)
            for script in (INFRA / "redis").iterdir():
                (self.mount / script.name).write_text(self._paths(script.read_text()))
        argv = [self._paths(arg) for arg in [*self.service["entrypoint"], *self.service["command"]]]
        env = {**os.environ, "PATH": f"{self.dir.parent / 'stubs'}:{os.environ['PATH']}",
               **{k: _interpolate(str(v)) for k, v in self.service["environment"].items()}}
        with open(self.dir / "out.log", "ab") as log:
            self.process = subprocess.Popen(argv, cwd=self.data, env=env, stdout=log, stderr=subprocess.STDOUT)

    def healthy(self) -> bool:
        """The service's healthcheck, run as the engine runs it (CMD-SHELL, the container's environment)."""
        kind, command = self.service["healthcheck"]["test"]
        assert kind == "CMD-SHELL", kind
        env = {**os.environ, **{k: _interpolate(str(v)) for k, v in self.service["environment"].items()}}
        return subprocess.run(["sh", "-c", command.replace("$$", "$")], env=env, capture_output=True, timeout=10).returncode == 0


def _interpolate(value: str) -> str:
    """``${NAME:?...}`` / ``${NAME}`` as docker compose fills them from infra/.env."""
    return re.sub(r"\$\{([A-Z0-9_]+)[^}]*\}", lambda m: SECRETS[m.group(1)], value)


def _wait(check: Callable[[], bool], timeout: float, what: str, containers: list[Container]) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        try:
            if check():
                return time.monotonic() - start
        except redis.RedisError:
            pass
        time.sleep(0.25)
    logs = "\n".join(f"--- {c.name}\n{c.log()}" for c in containers)
    raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}\n{logs}")


def _sentinel(port: int) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=port, socket_timeout=2, decode_responses=True)


def _admin(port: int) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=port, username="default", password=SECRETS["POSTBOX_REDIS_ADMIN_PASSWORD"],
                       socket_timeout=2, decode_responses=True)


def rehearse(work: Path) -> dict[str, Any]:
    from postbox.cli.compose_env import REPLICA_SENTINEL_PORTS, compose_env
    from postbox.redis_client import connect

    services = compose_files.merged(INFRA / "docker-compose.yml", INFRA / "docker-compose.replicas.yml")["services"]
    stubs = work / "stubs"
    stubs.mkdir(parents=True)
    (stubs / "docker-entrypoint.sh").write_text('#!/bin/sh\nexec "$@"\n')
    (stubs / "chown").write_text("#!/bin/sh\nexit 0\n")
    for stub in stubs.iterdir():
        stub.chmod(0o755)
    containers = [Container(work, name, services[name]) for name in SERVICES]
    by_name = {c.name: c for c in containers}
    try:
        for container in containers:
            container.start()
        settled = _wait(lambda: all(int(m["num-slaves"]) == 1 and int(m["num-other-sentinels"]) == 2
                                    for m in (_sentinel(p).sentinel_master("postbox") for p in REPLICA_SENTINEL_PORTS)),
                        90, "every Sentinel seeing the replica and the two other Sentinels", containers)
        healthy = _wait(lambda: all(c.healthy() for c in containers), 30, "every service's healthcheck passing", containers)
        seen = _sentinel(REPLICA_SENTINEL_PORTS[0])
        replicas = [(r["ip"], int(r["port"])) for r in seen.sentinel_slaves("postbox")]
        sentinels = sorted((s["ip"], int(s["port"])) for s in seen.sentinel_sentinels("postbox"))
        env_file = work / ".env"
        env_file.write_text("".join(f"{k}={v}\n" for k, v in SECRETS.items()))
        url = compose_env(env_file, replicas=True)["POSTBOX_REDIS_URL"]
        consumer = connect(url, socket_timeout=2)
        consumer.set("postbox:rehearsal", "before")
        # Replication is asynchronous: as the consumer's replica waits do, have the replica confirm it.
        acked: list[int] = []
        _wait(lambda: acked.append(consumer.wait(1, 2000)) or acked[-1] == 1, 30, "the replica confirming the write (WAIT 1)", containers)

        by_name["redis"].kill()
        killed = time.monotonic()
        _wait(lambda: seen.sentinel_get_master_addr_by_name("postbox") == ("127.0.0.1", 6380), 60, "the replica's promotion", containers)
        promoted = time.monotonic() - killed
        read_back: list[Any] = []
        _wait(lambda: bool(read_back.append(consumer.get("postbox:rehearsal")) or consumer.set("postbox:after", "1")), 30,
              "the consumer's client writing on the promoted primary", containers)
        primary_seen = consumer.connection_pool.get_master_address()  # type: ignore[union-attr]

        by_name["redis"].start()  # the same container, restarted
        restarted = time.monotonic()
        old = _admin(6379)
        _wait(lambda: (lambda i: i["role"] == "slave" and i["master_port"] == 6380 and i["master_link_status"] == "up")(old.info("replication")),
              60, "the old primary back as a replica of the promoted one", containers)
        rejoined = time.monotonic() - restarted
        conf = (by_name["redis"].tmp / "postbox-replication.conf").read_text()
        return {
            "settled_s": round(settled, 1), "healthchecks_s": round(healthy, 1), "wait_acked": acked[-1], "replicas": replicas, "sentinels": sentinels,
            "promoted": list(seen.sentinel_get_master_addr_by_name("postbox")), "promoted_s": round(promoted, 1),
            "read_back": read_back[-1].decode() if read_back[-1] else None, "client_primary": list(primary_seen),
            "rejoined_s": round(rejoined, 1), "old_primary_conf_replicaof": re.findall(r"^replicaof (.*)$", conf, re.M),
            "url": re.sub(r":[^@/]*@", ":***@", url),
        }
    finally:
        for container in reversed(containers):
            container.stop()


def main() -> None:
    work = Path(sys.argv[1])
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    try:
        print(json.dumps(rehearse(work)))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
