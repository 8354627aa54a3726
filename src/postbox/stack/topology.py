"""How many Kafka nodes, Connect workers and Redis replicas the local stack runs, remembered in its state folder.

Why remembered: `postbox up --kafka-nodes 3 --connect-workers 2` starts five JVMs; a later `up`,
`status` or `down` without the flags must find the same five (to report them, to stop them), so
the topology `up` last used is written to ``run/topology.json`` and read back by default.

Every Kafka node is a broker and a KRaft controller, so N nodes are an N-voter quorum. The
replication follows the node count: one node keeps everything at replication factor 1 (the
stack as it always was); three or more replicate every topic, the internal ones included, three
times with ``min.insync.replicas=2``, so one node may die without losing an acknowledged write
or refusing one.

Redis replicas come with three Sentinels (a majority of two decides a failover): the consumers
of the stack then reach Redis through the Sentinels and follow a promotion without a restart.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from postbox.errors import ConfigError

#: Node and worker counts `postbox up` accepts (more would not fit a laptop's cores anyway).
MAX_KAFKA_NODES = 5
MAX_CONNECT_WORKERS = 3
MAX_REDIS_REPLICAS = 2
#: Sentinels watching a replicated Redis: three, so two agree on a failover while one is down.
SENTINELS = 3
FILE = "topology.json"


@dataclass(frozen=True)
class Topology:
    kafka_nodes: int = 1
    connect_workers: int = 1
    redis_replicas: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.kafka_nodes <= MAX_KAFKA_NODES:
            raise ConfigError(f"--kafka-nodes {self.kafka_nodes}: the local stack runs 1 to {MAX_KAFKA_NODES} Kafka nodes",
                              fix="use --kafka-nodes 3 for a replicated cluster (one node may fail), 1 for the plain stack")
        if not 1 <= self.connect_workers <= MAX_CONNECT_WORKERS:
            raise ConfigError(f"--connect-workers {self.connect_workers}: the local stack runs 1 to {MAX_CONNECT_WORKERS} Connect workers",
                              fix="use --connect-workers 2 to rehearse a worker failover, 1 for the plain stack")
        if not 0 <= self.redis_replicas <= MAX_REDIS_REPLICAS:
            raise ConfigError(f"--redis-replicas {self.redis_replicas}: the local stack runs 0 to {MAX_REDIS_REPLICAS} Redis replicas",
                              fix="use --redis-replicas 1 to rehearse a failover (with 3 Sentinels), 0 for the plain stack")

    @property
    def single(self) -> bool:
        """One node, one worker, one Redis: the stack exactly as it was before topologies."""
        return self.kafka_nodes == 1 and self.connect_workers == 1 and self.redis_replicas == 0

    @property
    def sentinels(self) -> int:
        """Sentinels watching the Redis primary: none without replicas (nothing to fail over to)."""
        return SENTINELS if self.redis_replicas else 0

    @property
    def replication_factor(self) -> int:
        """Of every topic, the internal ones included: all nodes, at most three."""
        return min(self.kafka_nodes, 3)

    @property
    def min_insync_replicas(self) -> int:
        """Two of three: one node may be down and acks=all writes still succeed, never on one copy alone."""
        return 2 if self.replication_factor >= 3 else 1

    def describe(self) -> str:
        redis = f", Redis with {self.redis_replicas} replica(s) and {self.sentinels} Sentinels" if self.redis_replicas else ""
        return (f"{self.kafka_nodes} Kafka node(s), {self.connect_workers} Connect worker(s), "
                f"replication factor {self.replication_factor}, min.insync.replicas {self.min_insync_replicas}{redis}")

    # -- the state folder's record ----------------------------------------------------------------
    @classmethod
    def load(cls, run_dir: Path) -> "Topology":
        """The topology `up` last used here; the default (1 and 1) when none was recorded."""
        path = run_dir / FILE
        try:
            data = json.loads(path.read_text())
            return cls(int(data["kafka_nodes"]), int(data["connect_workers"]), int(data.get("redis_replicas", 0)))
        except FileNotFoundError:
            return cls()
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"{path} is not a topology record ({exc})",
                              fix="remove it and run `postbox up` again (with --kafka-nodes / --connect-workers / --redis-replicas as wanted)") from None

    def save(self, run_dir: Path) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / FILE).write_text(json.dumps({"kafka_nodes": self.kafka_nodes, "connect_workers": self.connect_workers,
                                                "redis_replicas": self.redis_replicas}) + "\n")


def choose(run_dir: Path, kafka_nodes: int | None, connect_workers: int | None, redis_replicas: int | None = None) -> Topology:
    """The flags over the recorded topology (a flag left out keeps what was recorded)."""
    recorded = Topology.load(run_dir)
    return Topology(kafka_nodes if kafka_nodes is not None else recorded.kafka_nodes,
                    connect_workers if connect_workers is not None else recorded.connect_workers,
                    redis_replicas if redis_replicas is not None else recorded.redis_replicas)
