"""`postbox up --kafka-nodes N --connect-workers M`: the configuration each node and worker gets,
the ports they take, the topology the state folder remembers, and the plain stack unchanged."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from postbox.errors import ConfigError, StackError
from postbox.stack.layout import StackLayout
from postbox.stack.ports import StackPorts
from postbox.stack.stack import LocalStack
from postbox.stack.topology import Topology, choose

PORTS = StackPorts(postgres=5432, redis=6379, kafka=9092, controller=9093, connect=8083)


def _props(text: str) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in text.splitlines() if line.strip() and not line.startswith("#"))
    return {k: v for k, v in pairs}


def _stack(tmp_path: Path, topology: Topology | None = None) -> LocalStack:
    return LocalStack(StackLayout(tmp_path / "state"), PORTS, locate_tools=False, topology=topology)


def test_the_plain_stack_keeps_its_one_node_configuration(tmp_path):
    stack = _stack(tmp_path)
    [node] = stack.kafka_nodes
    kafka = _props(node.render())
    assert node.name == "kafka" and node.config_path == stack.layout.run / "kafka.properties"
    assert kafka["node.id"] == "1"
    assert kafka["controller.quorum.bootstrap.servers"] == "127.0.0.1:9093" and "controller.quorum.voters" not in kafka
    assert kafka["log.dirs"] == str(stack.layout.kafka_data)
    for key in ("offsets.topic.replication.factor", "transaction.state.log.replication.factor", "default.replication.factor",
                "transaction.state.log.min.isr", "min.insync.replicas", "share.coordinator.state.topic.replication.factor"):
        assert kafka[key] == "1", key
    [worker] = stack.connect_workers
    stack.layout.ensure()
    worker.init()
    connect = _props(worker.config_path.read_text())
    assert worker.name == "connect" and worker.config_path.name == "connect.properties"
    assert connect["bootstrap.servers"] == "127.0.0.1:9092" and connect["listeners"] == "http://127.0.0.1:8083"
    assert connect["config.storage.replication.factor"] == "1"
    assert stack.env()["POSTBOX_KAFKA_BOOTSTRAP"] == "127.0.0.1:9092"


def test_three_nodes_are_three_voters_replicating_everything_three_times(tmp_path):
    stack = _stack(tmp_path, Topology(3, 2))
    configs = [_props(node.render()) for node in stack.kafka_nodes]
    assert [c["node.id"] for c in configs] == ["1", "2", "3"]
    voters = "1@127.0.0.1:9093,2@127.0.0.1:9095,3@127.0.0.1:9097"
    assert {c["controller.quorum.voters"] for c in configs} == {voters}
    assert [c["listeners"] for c in configs] == [
        f"PLAINTEXT://127.0.0.1:{b},CONTROLLER://127.0.0.1:{c}" for b, c in ((9092, 9093), (9094, 9095), (9096, 9097))]
    assert len({c["log.dirs"] for c in configs}) == 3
    for c in configs:
        assert c["default.replication.factor"] == c["offsets.topic.replication.factor"] == "3"
        assert c["transaction.state.log.replication.factor"] == "3"
        assert c["min.insync.replicas"] == c["transaction.state.log.min.isr"] == "2"
    stack.layout.ensure()
    workers = []
    for worker in stack.connect_workers:
        worker.init()
        workers.append(_props(worker.config_path.read_text()))
    assert [w["listeners"] for w in workers] == ["http://127.0.0.1:8083", "http://127.0.0.1:8084"]
    for w in workers:
        assert w["group.id"] == "postbox-connect"
        assert w["bootstrap.servers"] == "127.0.0.1:9092,127.0.0.1:9094,127.0.0.1:9096"
        assert w["config.storage.replication.factor"] == w["offset.storage.replication.factor"] == w["status.storage.replication.factor"] == "3"
        assert w["producer.acks"] == "all" and w["producer.enable.idempotence"] == "true"
    assert stack.env()["POSTBOX_KAFKA_BOOTSTRAP"] == "127.0.0.1:9092,127.0.0.1:9094,127.0.0.1:9096"


def test_status_lists_every_node_and_worker(tmp_path):
    status = _stack(tmp_path, Topology(3, 2)).status()
    assert [n["name"] for n in status["kafka_nodes"]] == ["kafka-1", "kafka-2", "kafka-3"]
    assert [w["name"] for w in status["connect_workers"]] == ["connect-1", "connect-2"]
    assert {n["state"] for n in status["kafka_nodes"] + status["connect_workers"]} == {"stopped"}
    assert status["kafka"]["state"] == "stopped" and status["topology"]["replication_factor"] == 3


def test_the_topology_up_used_is_what_a_later_command_sees(tmp_path):
    run = tmp_path / "run"
    assert Topology.load(run) == Topology(1, 1)
    Topology(3, 2).save(run)
    assert choose(run, None, None) == Topology(3, 2)
    assert choose(run, None, 1) == Topology(3, 1)
    assert choose(run, 1, 1).single


def test_a_new_topology_is_refused_while_the_old_one_runs(tmp_path):
    """Starting 3 nodes beside a running 1-node broker would start a second cluster on its ports."""
    stack = _stack(tmp_path)
    stack.layout.ensure()
    Topology(1, 1).save(stack.layout.run)
    # A process whose command line carries the broker's marker (its config path) stands for it.
    old = subprocess.Popen(["sh", "-c", "sleep 60", str(stack.kafka.config_path)])
    try:
        stack.kafka.process.pidfile.write_text(f"{old.pid}\n")
        assert stack.kafka.running()
        with pytest.raises(StackError, match="runs 1 Kafka node.*kafka up") as raised:
            _stack(tmp_path, Topology(3, 2))._check_topology_change()
        assert "postbox down" in str(raised.value.fix)
    finally:
        old.kill()
        old.wait()
    _stack(tmp_path, Topology(3, 2))._check_topology_change()  # stopped: the new topology may start


@pytest.mark.parametrize("nodes, workers", [(0, 1), (6, 1), (1, 0), (1, 4)])
def test_counts_out_of_range_are_refused(nodes, workers):
    with pytest.raises(ConfigError, match="--kafka-nodes|--connect-workers"):
        Topology(nodes, workers)


def test_derived_ports_that_collide_are_named():
    ports = StackPorts(postgres=5432, redis=9094, kafka=9092, controller=9093, connect=8083)
    with pytest.raises(ConfigError, match="Kafka node 2 broker and Redis would both listen on port 9094"):
        ports.check(3, 1)
    PORTS.check(5, 3)  # the largest topology fits beside the defaults


def test_nodes_formatting_at_once_share_one_cluster_id(tmp_path):
    """`postbox up` formats the nodes in parallel threads: each must format with the same cluster id,
    or the first vote between them fails with INCONSISTENT_CLUSTER_ID and a node exits."""
    import threading

    for attempt in range(40):
        nodes = _stack(tmp_path / str(attempt), Topology(3, 1)).kafka_nodes
        barrier = threading.Barrier(len(nodes))
        drawn: list[str] = []

        def draw(node, barrier: threading.Barrier = barrier, drawn: list[str] = drawn) -> None:
            barrier.wait()
            drawn.append(node._cluster_id())

        threads = [threading.Thread(target=draw, args=(node,)) for node in nodes]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(set(drawn)) == 1, f"attempt {attempt}: the nodes drew {sorted(set(drawn))}"


def test_a_replicated_redis_takes_ports_above_the_primary_and_three_sentinels(tmp_path):
    stack = _stack(tmp_path, Topology(redis_replicas=1))
    assert [(n.name, n.port) for n in stack.redis_group.nodes] == [("redis", 6379), ("redis-2", 6380)]
    assert [(s.name, s.port, s.quorum) for s in stack.redis_group.sentinels] == [
        ("sentinel-1", 26379, 2), ("sentinel-2", 26380, 2), ("sentinel-3", 26381, 2)]
    assert stack.redis_group.nodes[1].data_dir != stack.redis_group.nodes[0].data_dir
    assert "3 Sentinels" in stack.topology.describe()


def test_the_plain_stack_has_no_sentinel_and_keeps_its_redis_url(tmp_path):
    stack = _stack(tmp_path)
    assert stack.redis_group.sentinels == [] and [n.name for n in stack.redis_group.nodes] == ["redis"]
    assert stack.redis_group.consumer_url().startswith("redis://")


def test_a_sentinel_port_on_a_replica_is_refused_with_both_names():
    ports = StackPorts(postgres=5432, redis=6379, kafka=9092, controller=9093, connect=8083, sentinel=6380)
    with pytest.raises(ConfigError, match="Sentinel 1 and Redis replica 1 would both listen on port 6380"):
        ports.check(1, 1, redis_replicas=1, sentinels=3)


def test_a_topology_record_from_before_redis_replicas_reads_as_none(tmp_path):
    (tmp_path / "topology.json").write_text('{"kafka_nodes": 3, "connect_workers": 2}\n')
    assert Topology.load(tmp_path) == Topology(3, 2, 0)
    Topology(3, 2, 1).save(tmp_path)
    assert Topology.load(tmp_path).redis_replicas == 1


def test_too_many_redis_replicas_are_refused_with_the_fix():
    with pytest.raises(ConfigError, match="--redis-replicas 5") as caught:
        Topology(redis_replicas=5)
    assert "--redis-replicas 1" in (caught.value.fix or "")
