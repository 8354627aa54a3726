"""#13.2 Redis Cluster from the command line: `postbox consume` and the incident commands on a real
three-master cluster of Debian redis-server processes, through a ``redis+cluster://`` URL; a plain
``redis://`` URL naming one of its nodes is a configuration error that says how to write it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.conftest_effects import redis_cluster  # noqa: F401 - fixture
from tests.integration.incident_support import run_cli
from tests.support.consumers import ConsumerProcess, committed, create_topic, json_event, produce, wait_for
from tests.support.kafka import drop_topics

pytestmark = pytest.mark.integration


def _cluster_url(cluster) -> str:
    return "redis+cluster://" + ",".join(f"127.0.0.1:{s.port}" for s in cluster.servers[:2])


def test_consume_and_incident_commands_on_a_cluster(redis_cluster, settings, unique: str, tmp_path: Path) -> None:  # noqa: F811
    agg = f"rc{unique}"
    topic, group = f"outbox.event.{agg}", f"test-rc-{unique}"
    create_topic(settings.kafka_bootstrap, topic, 2)
    events = [json_event(agg, f"a{i % 12}", "Counted", i) for i in range(24)]
    produce(settings.kafka_bootstrap, topic, events)
    url = _cluster_url(redis_cluster)
    consumer = ConsumerProcess("tests.apps.counting:app", {"POSTBOX_REDIS_URL": url}, tmp_path / "c.log",
                               ["--group", group, "--topics", topic])  # fmt: skip
    try:
        wait_for(lambda: sum(committed(settings.kafka_bootstrap, group, topic, 2).values()) == 24 or not consumer.alive(),
                 60, "24 committed")  # fmt: skip
        assert consumer.terminate() == 0, consumer.output()
    finally:
        consumer.close()
    client = redis_cluster.client()
    keys = [f"{{{agg}:a{n}}}:seq" for n in range(12)]
    assert sum(client.llen(k) for k in keys) == 24
    assert len({client.get_node_from_key(k).name for k in keys}) > 1  # the effects really spread over nodes
    client.close()

    event_id = events[5][2][0][1].decode()
    trace = run_cli("trace", event_id, "--json", env={"POSTBOX_REDIS_URL": url})
    verdicts = json.dumps(json.loads(trace.stdout))
    assert group in verdicts and "applied" in verdicts, trace.stdout[-2000:] + trace.stderr[-2000:]
    doctor = run_cli("doctor", "--json", env={"POSTBOX_REDIS_URL": url})
    checks = {c["check"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert checks["redis reachable"]["status"] == "ok" and checks["scripts loadable"]["status"] == "ok", checks
    drop_topics(settings.kafka_bootstrap, topic)


def test_plain_url_of_a_cluster_node_says_how_to_configure_a_cluster(redis_cluster) -> None:  # noqa: F811
    node = f"127.0.0.1:{redis_cluster.servers[0].port}"
    done = run_cli("consume", "tests.apps.counting:app", "--group", "test-rc-plain", "--topics", "outbox.event.rcnever",
                   "--redis-url", f"redis://{node}/0", timeout=60)  # fmt: skip
    assert done.returncode == 1, done.stdout[-1500:] + done.stderr[-1500:]
    assert "Redis said CROSSSLOT" not in done.stderr  # the engine error it used to be
    assert f"Redis at redis://{node}/0 is a node of a Redis Cluster" in done.stderr
    assert f"redis+cluster://{node}" in done.stderr
    doctor = run_cli("doctor", "--json", "--redis-url", f"redis://{node}/0")
    check = {c["check"]: c for c in json.loads(doctor.stdout)["checks"]}["redis reachable"]
    assert check["status"] == "fail" and f"redis+cluster://{node}" in check["fix"]
