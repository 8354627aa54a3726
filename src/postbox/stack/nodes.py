"""The Kafka nodes and Connect workers of one topology, built from the stack's layout and ports.

One place decides each node's id, ports, voters, replication and files, and each worker's port
and bootstrap list, so `up`, `status`, `down` and the fault suite's private clusters all see the
same processes (:mod:`postbox.stack.topology` says how many).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Sequence

from postbox.stack.connect import LocalConnect
from postbox.stack.kafka import LocalKafka, NodeSpec, new_cluster_id
from postbox.stack.layout import StackLayout
from postbox.stack.ports import StackPorts
from postbox.stack.topology import Topology


def kafka_nodes(layout: StackLayout, java: Path | None, ports: StackPorts, topology: Topology) -> list[LocalKafka]:
    """Node 1 alone as always (standalone quorum, its usual files), or ``topology.kafka_nodes``
    nodes that all know every voter and format with one cluster id."""
    if topology.kafka_nodes == 1:
        return [LocalKafka(layout, java, ports.kafka, ports.controller)]
    count = topology.kafka_nodes
    voters = tuple(f"{n}@127.0.0.1:{ports.kafka_node(n)[1]}" for n in range(1, count + 1))
    id_file = layout.root / "kafka" / f"cluster-{count}" / "cluster.id"

    def cluster_id() -> str:
        """One id for every node of the cluster, drawn by whichever node formats first.

        The nodes format in parallel: the id file is created whole or not at all (a link, which
        fails when the file exists), so no two nodes can each write an id of their own."""
        if not id_file.is_file():
            id_file.parent.mkdir(parents=True, exist_ok=True)
            draft = id_file.with_name(f"{id_file.name}.{os.getpid()}.{threading.get_ident()}")
            draft.write_text(new_cluster_id() + "\n")
            try:
                os.link(draft, id_file)
            except FileExistsError:
                pass  # another node drew first: its id is the cluster's
            finally:
                draft.unlink()
        return id_file.read_text().strip()

    return [
        LocalKafka(layout, java, *ports.kafka_node(n),
                   spec=NodeSpec(n, voters, topology.replication_factor, topology.min_insync_replicas), cluster_id=cluster_id)
        for n in range(1, count + 1)
    ]


def bootstrap(nodes: Sequence[LocalKafka]) -> str:
    """Every node's address: a client (or a worker) that starts while one node is down still finds the cluster."""
    return ",".join(node.address for node in nodes)


def connect_workers(layout: StackLayout, java: Path | None, ports: StackPorts, topology: Topology,
                    nodes: Sequence[LocalKafka]) -> list[LocalConnect]:
    """Worker 1 alone as always, or ``topology.connect_workers`` workers of one group."""
    servers = bootstrap(nodes)
    if topology.connect_workers == 1:
        return [LocalConnect(layout, java, ports.connect, ports.kafka, bootstrap=servers, replication_factor=topology.replication_factor)]
    return [
        LocalConnect(layout, java, ports.connect_worker(w), ports.kafka, bootstrap=servers, worker=w,
                     replication_factor=topology.replication_factor)
        for w in range(1, topology.connect_workers + 1)
    ]


def process_status(component: Any) -> dict[str, Any]:
    """One process's line of `postbox status`."""
    running = component.running()
    return {"name": component.name, "state": "running" if running else "stopped", "address": component.address,
            "pid": component.pid() if running else None, "log": str(component.log_path)}


def group_status(members: Sequence[Any], address: str) -> dict[str, Any]:
    """The summary of several processes of one kind: running when all are, degraded when some are."""
    lines = [process_status(m) for m in members]
    up = sum(1 for line in lines if line["state"] == "running")
    if len(lines) == 1:
        return {**{k: v for k, v in lines[0].items() if k != "name"}, "address": address}
    state = "running" if up == len(lines) else "stopped" if up == 0 else f"degraded ({up} of {len(lines)} running)"
    first_pid = next((line["pid"] for line in lines if line["pid"]), None)
    return {"state": state, "address": address, "pid": first_pid, "log": lines[0]["log"]}


def init_all(components: Sequence[Any]) -> list[Any]:
    """``init()`` every component at once (each Kafka node's storage format is a JVM start of its
    own: three in a row took as long as the brokers' start); the components whose init changed something."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=max(1, len(components))) as pool:
        changed = list(pool.map(lambda component: component.init(), components))
    return [component for component, did in zip(components, changed) if did]
