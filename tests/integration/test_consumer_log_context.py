"""#16.3 logs that belong to the event: a real `postbox consume` run, its stderr captured in the
JSON and in the text format. Every line written while an event is handled — the handler's own
logger (INFO included, which was dropped before) and postbox's (the in-place retries, the dead
letter) — carries group, topic, partition, offset, event id, event type and trace id; the
handler's lines are JSON in the JSON format, not plain text between JSON lines."""

from __future__ import annotations

import json
import re
import uuid

import pytest

from tests.support.consumers import ConsumerProcess, committed, create_topic, json_event, produce, wait_for

pytestmark = pytest.mark.integration

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"  # the traceparent tests.support.consumers.router_headers sets
FIELDS = ("group", "topic", "partition", "offset", "event_id", "event_type", "trace_id")


@pytest.fixture
def topic_with_events(settings, unique):
    agg = f"logs{unique}"
    topic = f"outbox.event.{agg}"
    create_topic(settings.kafka_bootstrap, topic, 1)
    records = [json_event(agg, "a1", "Counted", i, event_id=str(uuid.uuid4()), partition=0) for i in range(3)]
    records.append(json_event(agg, "a1", "Refused", 3, event_id=str(uuid.uuid4()), partition=0))
    records += [json_event(agg, f"b{i}", "Awaited", 4 + i, event_id=str(uuid.uuid4()), partition=0) for i in range(2)]
    produce(settings.kafka_bootstrap, topic, records)
    ids = {r[2][0][1].decode(): offset for offset, r in enumerate(records)}
    return topic, ids


def _run(settings, topic: str, group: str, log_format: str, path) -> list[str]:
    env = {"POSTBOX_REDIS_URL": settings.redis_url, "POSTBOX_KAFKA_BOOTSTRAP": settings.kafka_bootstrap}
    proc = ConsumerProcess("tests.apps.lifecycle:app", env, path,
                           ["--group", group, "--topics", topic, "--log-format", log_format, "--handler-retries", "1"])
    try:
        wait_for(lambda: proc.alive() and committed(settings.kafka_bootstrap, group, topic, 1)[0] == 6, 60, "6 committed")
        assert proc.terminate() == 0
    finally:
        proc.close()
    return path.read_text().splitlines()


def test_json_lines_of_handlers_and_postbox_carry_the_event(settings, unique, tmp_path, topic_with_events):
    topic, ids = topic_with_events
    group = f"test-logs-json-{unique}"
    lines = _run(settings, topic, group, "json", tmp_path / "json.log")
    records = []
    for line in lines:
        records.append(json.loads(line))  # every line is JSON: the handler's and librdkafka's included
    ours = [r for r in records if r["logger"] == "shop.lifecycle_test"]
    # logger.info() is no longer dropped: each Counted and Awaited event logs it (again when the
    # partition retries from the Refused event before it: a handler runs again, its effects do not)
    informed = [r for r in ours if r["level"] == "info"]
    assert {r["event_id"] for r in informed} == {eid for eid, offset in ids.items() if offset != 3} and len(informed) >= 3 + 2
    # the Refused event: one call and one in-place retry (more when the first dead letter of a new
    # DLQ topic is not acknowledged and the partition retries)
    assert [r["level"] for r in ours].count("warning") == 1 and [r["level"] for r in ours].count("error") >= 2
    postbox_lines = [r for r in records if r["msg"].startswith(("handler raised", "permanent failure"))]
    assert [r["msg"] for r in postbox_lines].count("permanent failure: dead-lettered") == 1 and len(postbox_lines) >= 2
    per_event = ours + postbox_lines
    for record in per_event:
        assert all(record.get(f) is not None for f in FIELDS), record
        assert record["group"] == group and record["topic"] == topic and record["partition"] == 0
        assert record["trace_id"] == TRACE_ID and ids[record["event_id"]] == record["offset"]
    assert {r["event_type"] for r in per_event} == {"Counted", "Refused", "Awaited"}
    # async handlers of one batch run concurrently, each in its own task with its own event's context
    awaited = {r["event_id"]: r["msg"] for r in ours if r["event_type"] == "Awaited"}
    assert sorted(awaited.values()) == ["awaited seq 4", "awaited seq 5"] and len(awaited) == 2
    assert all(f"seq {ids[eid]}" in msg for eid, msg in awaited.items())
    # lines outside an event carry the group but no event
    started = next(r for r in records if r["msg"] == "consumer subscribed")
    assert started["group"] == group and "event_id" not in started


def test_text_lines_carry_the_same_fields(settings, unique, tmp_path, topic_with_events):
    topic, ids = topic_with_events
    group = f"test-logs-text-{unique}"
    lines = [line for line in _run(settings, topic, group, "text", tmp_path / "text.log") if "shop.lifecycle_test:" in line]
    assert len(lines) >= 3 + 1 + 2 + 2
    for line in lines:
        fields = dict(re.findall(r" (\w+)=(\S+)", line))
        assert fields["group"] == group and fields["topic"] == topic and fields["partition"] == "0"
        assert fields["trace_id"] == TRACE_ID and ids[fields["event_id"]] == int(fields["offset"])
        assert fields["event_type"] in ("Counted", "Refused", "Awaited")
    assert any(" INFO " in line and "handler counted seq 0" in line for line in lines)
