"""The local stack's ports: the usual ones by default, each overridable by an environment variable.

A stack of several Kafka nodes or Connect workers derives their ports from the configured ones
(node ``i`` listens two above node ``i-1``, broker and controller alike; worker ``j`` one above
worker ``j-1``), so one setting moves a whole cluster and the extra ports never fall on the
other defaults (9094-9101 and 8084-8085 for the largest topology). Redis replica ``r`` listens
``r`` above the primary (6380-6381), Sentinel ``s`` ``s-1`` above ``POSTBOX_SENTINEL_PORT`` (26379,
Sentinel's own default, to 26381).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from postbox.errors import ConfigError
from postbox import settings as _defaults


def _port(var: str, default: int) -> int:
    raw = os.environ.get(var)
    if not raw:
        return default
    if not raw.isdigit() or not 0 < int(raw) < 65536:
        raise ConfigError(f"{var}={raw!r} is not a TCP port (1-65535)")
    return int(raw)


@dataclass(frozen=True)
class StackPorts:
    postgres: int
    redis: int
    kafka: int
    controller: int
    connect: int
    sentinel: int = _defaults.LOCAL_SENTINEL_PORT

    @classmethod
    def from_env(cls) -> "StackPorts":
        return cls(
            postgres=_port("POSTBOX_PG_PORT", _defaults.LOCAL_PG_PORT),
            redis=_port("POSTBOX_REDIS_PORT", _defaults.LOCAL_REDIS_PORT),
            kafka=_port("POSTBOX_KAFKA_PORT", _defaults.LOCAL_KAFKA_PORT),
            controller=_port("POSTBOX_KAFKA_CONTROLLER_PORT", _defaults.LOCAL_KAFKA_PORT + 1),
            connect=_port("POSTBOX_CONNECT_PORT", _defaults.LOCAL_CONNECT_PORT),
            sentinel=_port("POSTBOX_SENTINEL_PORT", _defaults.LOCAL_SENTINEL_PORT),
        )

    def kafka_node(self, node: int) -> tuple[int, int]:
        """(broker port, controller port) of Kafka node ``node`` (1-based); node 1 has the configured ones."""
        step = NODE_PORT_STEP * (node - 1)
        return self.kafka + step, self.controller + step

    def connect_worker(self, worker: int) -> int:
        """REST port of Connect worker ``worker`` (1-based); worker 1 has the configured one."""
        return self.connect + worker - 1

    def redis_node(self, node: int) -> int:
        """Port of Redis node ``node`` (1-based): node 1 is the configured Redis, replicas follow it."""
        return self.redis + node - 1

    def sentinel_node(self, sentinel: int) -> int:
        """Port of Sentinel ``sentinel`` (1-based)."""
        return self.sentinel + sentinel - 1

    def check(self, kafka_nodes: int, connect_workers: int, redis_replicas: int = 0, sentinels: int = 0) -> None:
        """Every port of the topology distinct and valid, else a ConfigError naming the two that collide."""
        named: dict[int, str] = {self.postgres: "PostgreSQL", self.redis: "Redis"}
        wanted = [(f"Redis replica {r}", self.redis_node(r + 1)) for r in range(1, redis_replicas + 1)]
        wanted += [(f"Sentinel {s}", self.sentinel_node(s)) for s in range(1, sentinels + 1)]
        wanted += [(f"Kafka node {n} broker", self.kafka_node(n)[0]) for n in range(1, kafka_nodes + 1)]
        wanted += [(f"Kafka node {n} controller", self.kafka_node(n)[1]) for n in range(1, kafka_nodes + 1)]
        wanted += [(f"Connect worker {w}", self.connect_worker(w)) for w in range(1, connect_workers + 1)]
        for what, port in wanted:
            if not 0 < port < 65536:
                raise ConfigError(f"{what} would listen on port {port}, which is not a TCP port",
                                  fix="set POSTBOX_KAFKA_PORT / POSTBOX_KAFKA_CONTROLLER_PORT / POSTBOX_CONNECT_PORT / "
                                      "POSTBOX_REDIS_PORT / POSTBOX_SENTINEL_PORT lower")
            if port in named:
                raise ConfigError(f"{what} and {named[port]} would both listen on port {port}",
                                  fix="move one with POSTBOX_KAFKA_PORT / POSTBOX_KAFKA_CONTROLLER_PORT / POSTBOX_CONNECT_PORT / "
                                      "POSTBOX_REDIS_PORT / POSTBOX_SENTINEL_PORT "
                                      f"(node i listens {NODE_PORT_STEP}(i-1) above node 1, worker j j-1 above worker 1, "
                                      "Redis replica r r above the primary, Sentinel s s-1 above the first)")
            named[port] = what


#: Kafka node ``i``'s ports are this much above node ``i-1``'s (the default controller port is the broker's + 1).
NODE_PORT_STEP = 2
