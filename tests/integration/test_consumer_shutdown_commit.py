"""#12.12: a SIGTERM mid-stream ends with every applied offset committed.

``postbox consume`` runs in its own process under load (a backlog, handlers slowed to ~1 ms) and
gets SIGTERM while it is applying. It must exit 0 having committed exactly what it applied; a
consumer started afterwards on the same group then meets no redelivered record at all: zero
duplicates counted.

The bug this guards against: asynchronous commits were counted as done when *sent*, so the final
synchronous commit sent nothing while the last async commit could still be in flight (or refused),
and a failed final commit was not retried; the restarted consumer then re-read (and deduplicated)
the tail of what the first one had applied. Honest note: against the main the fix was written
for, this end-to-end test passed in 3 of 3 runs here (librdkafka's close() completed the in-flight
async commit on a healthy broker); the bookkeeping bug itself is shown failing by
tests/unit/test_consumer_final_commit.py, with a refused commit.
"""

from __future__ import annotations

import uuid

import pytest

from postbox.consumer import ConsumerConfig
from tests.apps.counting import app as counting_app
from tests.support.consumers import ConsumerProcess, ThreadedRuntime, committed, create_topic, json_event, produce, wait_for

pytestmark = pytest.mark.integration

RECORDS = 3000
AGGREGATES = 30


def _applied(redis_client, agg: str) -> int:
    return sum(int(redis_client.hget(f"{{{agg}:a{i}}}:count", "n") or 0) for i in range(AGGREGATES))


def test_sigterm_under_load_commits_every_applied_offset_and_a_restart_redelivers_nothing(settings, redis_client, unique, tmp_path):
    agg = f"term{unique}"
    topic = f"outbox.event.{agg}"
    group = f"test-term-{unique}"
    create_topic(settings.kafka_bootstrap, topic, partitions=2)
    produce(settings.kafka_bootstrap, topic, [json_event(agg, f"a{i % AGGREGATES}", "Counted", i, event_id=str(uuid.uuid4()))
                                              for i in range(RECORDS)])
    env = {"POSTBOX_REDIS_URL": settings.redis_url, "POSTBOX_KAFKA_BOOTSTRAP": settings.kafka_bootstrap, "POSTBOX_TEST_SLEEP_MS": "1"}
    proc = ConsumerProcess("tests.apps.counting:app", env, tmp_path / "first.log",
                           ["--group", group, "--topics", topic, "--batch-size", "100"])
    try:
        wait_for(lambda: proc.alive() and _applied(redis_client, agg) >= 300, 60, "the first consumer applying")
        code = proc.terminate(timeout=60)
    finally:
        proc.close()
    assert code == 0, proc.output()
    applied = _applied(redis_client, agg)
    offsets = committed(settings.kafka_bootstrap, group, topic, 2)
    assert 0 < applied < RECORDS, f"the SIGTERM did not land mid-stream ({applied} of {RECORDS} applied)"
    assert sum(max(0, o) for o in offsets.values()) == applied, (offsets, applied)  # every applied offset committed

    runtime = ThreadedRuntime(counting_app, ConsumerConfig.load(group=group, topics=topic, batch_wait_ms=50)).start()
    try:
        wait_for(lambda: runtime.ok() and sum(committed(settings.kafka_bootstrap, group, topic, 2).values()) == RECORDS, 90,
                 "the restarted consumer committed the rest")
    finally:
        runtime.stop()
    assert runtime.metrics.total("postbox_consumer_duplicates_skipped_total") == 0  # zero redeliveries ...
    assert runtime.metrics.total("postbox_consumer_events_consumed_total") == RECORDS - applied  # ... not even read again
    assert runtime.metrics.total("postbox_consumer_events_applied_total") == RECORDS - applied
    assert _applied(redis_client, agg) == RECORDS
    redis_client.delete(*[f"{{{agg}:a{i}}}:{k}" for i in range(AGGREGATES) for k in ("seq", "count")])
