"""Acceptance: two consumer processes in one group, a third joins mid-run, one leaves (SIGTERM):
every event is still applied exactly once, in order per aggregate.

The events are produced in three phases around the membership changes (before the first two
members start, after the third joined, after the first left), so each change happens while work is
left for the new owners, whatever the machine's speed: a run that finishes before a rebalance
cannot pass for one that went through it."""

from __future__ import annotations

import uuid

import pytest

from tests.support.consumers import ConsumerProcess, committed, create_topic, json_event, produce, wait_for

pytestmark = pytest.mark.integration
PARTITIONS = 6
AGGREGATES = 24
PER_AGGREGATE = 120


def test_members_joining_and_leaving_keep_exactly_once(settings, redis_client, unique, tmp_path):
    agg = f"reb{unique}"
    topic = f"outbox.event.{agg}"
    group = f"test-reb-{unique}"
    create_topic(settings.kafka_bootstrap, topic, PARTITIONS)
    phases = [range(0, PER_AGGREGATE // 3), range(PER_AGGREGATE // 3, 2 * PER_AGGREGATE // 3),
              range(2 * PER_AGGREGATE // 3, PER_AGGREGATE)]

    def produce_phase(seqs: range) -> None:
        produce(settings.kafka_bootstrap, topic, [
            json_event(agg, f"a{a}", "Counted", seq, event_id=str(uuid.uuid4())) for seq in seqs for a in range(AGGREGATES)
        ])

    produce_phase(phases[0])
    total_events = AGGREGATES * PER_AGGREGATE
    env = {
        "POSTBOX_GROUP": group, "POSTBOX_TOPICS": topic, "POSTBOX_BATCH_SIZE": "50",
        "POSTBOX_SESSION_TIMEOUT_MS": "6000", "POSTBOX_TEST_SLEEP_MS": "2",
        "POSTBOX_REDIS_URL": settings.redis_url, "POSTBOX_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
    }
    keys = [f"{{{agg}:a{a}}}:seq" for a in range(AGGREGATES)]

    def applied() -> int:
        pipe = redis_client.pipeline(transaction=False)
        for key in keys:
            pipe.llen(key)
        return sum(pipe.execute())

    procs = [ConsumerProcess("tests.apps.counting:app", env, tmp_path / f"c{i}.log") for i in range(2)]
    try:
        phase_size = AGGREGATES * len(phases[0])
        wait_for(lambda: all(p.alive() for p in procs) and applied() >= phase_size // 2, 90, "phase 1 under way with two members")
        procs.append(ConsumerProcess("tests.apps.counting:app", env, tmp_path / "c2.log"))
        wait_for(lambda: procs[2].alive() and "partitions assigned" in procs[2].output(), 60, "the third member to get partitions")
        produce_phase(phases[1])  # work for three members
        wait_for(lambda: applied() >= phase_size * 3 // 2, 90, "phase 2 under way with three members")
        assert procs[0].terminate() == 0  # leaves the group: its partitions move to the others
        produce_phase(phases[2])  # work that only the two remaining members can do
        wait_for(lambda: all(p.alive() for p in procs[1:]) and applied() >= total_events, 120, "every event applied")
        wait_for(lambda: sum(committed(settings.kafka_bootstrap, group, topic, PARTITIONS).values()) == total_events, 60, "all committed")
        for p in procs[1:]:
            assert p.terminate() == 0
    finally:
        for p in procs:
            p.close()

    expected = [str(i).encode() for i in range(PER_AGGREGATE)]
    for key in keys:
        assert redis_client.lrange(key, 0, -1) == expected, key
    redis_client.delete(*keys, *[k.replace(":seq", ":count") for k in keys])
