"""`dlq replay` holds back a dead letter whose aggregate has later events in its partition.

The replayed copy is appended to the origin partition, so consumers apply it after every event of
its aggregate already there: an OrderPlaced replayed after the OrderShipped that was applied in
the meantime. The plan names those events and waits for `--force`. Events replayed together go
back in their order (no hold), and other aggregates are not held. Before the change every one of
these dead letters was planned "ready".
"""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka import Producer

from tests.integration.incident_support import run_cli
from tests.support.consumers import create_topic, router_headers

pytestmark = pytest.mark.integration


def dead_letter_headers(event_id: str, agg: str, topic: str, offset: int) -> list[tuple[str, bytes]]:
    """A dead letter's headers as the runtime writes them (origin partition 0)."""
    return [*router_headers(event_id, "Happened", agg), ("postbox.error", b"boom"), ("postbox.error.class", b"HandlerError:ValueError"),
            ("postbox.error.kind", b"permanent"), ("postbox.origin.topic", topic.encode()), ("postbox.origin.partition", b"0"),
            ("postbox.origin.offset", str(offset).encode()), ("postbox.attempts", b"1"), ("postbox.group", b"test-order-g")]


def test_replay_holds_a_dead_letter_that_later_events_of_its_aggregate_overtook(settings, unique) -> None:
    agg = f"ro{unique}"
    topic, dlq = f"outbox.event.{agg}", f"outbox.event.{agg}.dlq"
    create_topic(settings.kafka_bootstrap, topic, 1)
    create_topic(settings.kafka_bootstrap, dlq, 1)
    origin = [("A", "placed"), ("A", "shipped"), ("B", "placed"), ("C", "placed"), ("C", "paid")]
    ids = [str(uuid.uuid4()) for _ in origin]
    failed = [0, 2, 3, 4]  # A's shipped (offset 1) was applied after A's placed failed
    producer = Producer({"bootstrap.servers": settings.kafka_bootstrap, "acks": "all"})
    for (key, step), event_id in zip(origin, ids):
        producer.produce(topic, key=key.encode(), value=json.dumps({"step": step}).encode(), partition=0,
                         headers=router_headers(event_id, "Happened", agg))
    assert producer.flush(30) == 0
    for offset in failed:
        producer.produce(dlq, key=origin[offset][0].encode(), value=json.dumps({"step": origin[offset][1]}).encode(), partition=0,
                         headers=dead_letter_headers(ids[offset], agg, topic, offset))
    producer.produce(topic, key=b"A", value=b"{}", partition=0, headers=router_headers(ids[0], "Happened", agg))  # a copy of A's placed
    assert producer.flush(30) == 0

    plan = run_cli("dlq", "replay", "--topic", topic, "--all", "--json")
    assert plan.returncode == 1, plan.stdout + plan.stderr
    items = {item["event_id"]: item for item in json.loads(plan.stdout)["items"]}
    held = items[ids[0]]
    assert held["status"] == "unsafe", held
    assert f"1 later event(s) of aggregate 'A' are already in {topic}[0]: {ids[1]} (offset 1)" in held["reason"], held["reason"]
    assert [items[ids[i]]["status"] for i in (2, 3, 4)] == ["ready"] * 3, "B has nothing later; C's two go back together, in order"

    forced = run_cli("dlq", "replay", "--topic", topic, "--all", "--force", "--json")
    assert forced.returncode == 0, forced.stdout + forced.stderr
    again = {item["event_id"]: item for item in json.loads(forced.stdout)["items"]}
    assert again[ids[0]]["status"] == "ready" and "(--force given)" in again[ids[0]]["reason"]
