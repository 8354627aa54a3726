"""Documented incident commands that had no test of their success path (issue 18): `replay --group`
executing (the rewind, its audit record in `postbox.audit`, refusal of forward and too-old moves)
and `dlq list` / `dlq show` with their filters, on dead letters written by the real runtime."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta, timezone

import pytest
from confluent_kafka import Producer

from postbox.consumer import ConsumerConfig
from tests.apps.counting import strict
from tests.integration.incident_support import run_cli
from tests.support.cli import audit_records as read_audit
from tests.support.cli import invoke, invoke_json
from tests.support.consumers import ThreadedRuntime, commit_offset, committed, create_topic, json_event, produce, router_headers, wait_for

pytestmark = pytest.mark.integration


def audit_records(bootstrap: str, target: str) -> list[dict]:
    return [r for r in read_audit(bootstrap) if r.get("target") == target]


def produce_at(bootstrap: str, topic: str, count: int, timestamp_ms: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(count):
        producer.produce(topic, key=b"a1", value=json.dumps({"seq": i}).encode(), partition=0, timestamp=timestamp_ms,
                         headers=router_headers(str(uuid.uuid4()), "Counted", "old"))
    assert producer.flush(30) == 0


def test_replay_group_rewinds_audits_and_refuses_forward_moves(settings, unique):
    """docs/incident.md, "Re-consuming": `postbox replay --group G --to earliest` rewinds a stopped
    group's committed offsets and appends an audit record to `postbox.audit` ("Audit trail":
    command, target, count, user, host); a move *forward* is refused without `--force` (exit 1,
    offsets unchanged, nothing audited)."""
    topic, group = f"outbox.event.rp{unique}", f"test-rp-{unique}"
    create_topic(settings.kafka_bootstrap, topic, 1)
    produce(settings.kafka_bootstrap, topic, [json_event(f"rp{unique}", "a1", "Counted", i, partition=0) for i in range(5)])
    commit_offset(settings.kafka_bootstrap, group, topic, 5)

    done = invoke_json("replay", "--group", group, "--to", "earliest", "--execute", "--yes")
    assert done["applied"] is True and done["refused"] is False and done["reconsumed"] == 5
    assert done["partitions"] == [{**done["partitions"][0], "topic": topic, "partition": 0, "current": 5, "new": 0}]
    assert committed(settings.kafka_bootstrap, group, topic, 1) == {0: 0}
    (record,) = audit_records(settings.kafka_bootstrap, group)
    assert record["command"] == "replay" and record["count"] == 5 and record["outcome"] == "ok"
    assert record["user"] and record["host"] and record["schema"] == "postbox.audit/1"
    assert record["id"] == done["audit"]["id"]
    assert record["details"]["to"] == "earliest"

    commit_offset(settings.kafka_bootstrap, group, topic, 2)
    forward = run_cli("replay", "--group", group, "--to", "latest", "--execute", "--yes")
    assert forward.returncode == 1, forward.stdout + forward.stderr
    assert "refused" in forward.stderr and "skips 3 record(s)" in forward.stderr and "--force" in forward.stderr
    assert "Traceback" not in forward.stderr
    assert committed(settings.kafka_bootstrap, group, topic, 1) == {0: 2}
    assert len(audit_records(settings.kafka_bootstrap, group)) == 1, "a refused replay changed nothing and audits nothing"


def test_replay_group_refuses_records_older_than_the_dedupe_window(settings, unique):
    """docs/incident.md, "Re-consuming": the rewind is "refused without `--force` when that record
    is older than the dedupe window" (marker TTL minus the safety margin); with `--force` it runs
    and the audit record says so. Records written three days ago (their Kafka timestamps), markers
    living two days."""
    topic, group = f"outbox.event.rpold{unique}", f"test-rpold-{unique}"
    create_topic(settings.kafka_bootstrap, topic, 1)
    three_days_ago = int((datetime.now(timezone.utc) - timedelta(days=3)).timestamp() * 1000)
    produce_at(settings.kafka_bootstrap, topic, 3, three_days_ago)
    commit_offset(settings.kafka_bootstrap, group, topic, 3)

    refused = run_cli("replay", "--group", group, "--to", "earliest", "--marker-ttl", "2d", "--execute", "--yes")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "refused" in refused.stderr and "dedupe markers live" in refused.stderr, refused.stderr
    assert committed(settings.kafka_bootstrap, group, topic, 1) == {0: 3}
    assert audit_records(settings.kafka_bootstrap, group) == []

    inside = invoke_json("replay", "--group", group, "--to", "earliest", "--marker-ttl", "8d", "--dry-run")
    assert inside["refused"] is False and inside["applied"] is False, "three days old is inside an 8-day window"

    forced = invoke_json("replay", "--group", group, "--to", "earliest", "--marker-ttl", "2d", "--force", "--execute", "--yes")
    assert forced["applied"] is True and forced["problems"]
    assert committed(settings.kafka_bootstrap, group, topic, 1) == {0: 0}
    (record,) = audit_records(settings.kafka_bootstrap, group)
    assert record["details"]["force"] is True and record["count"] == 3


def produce_copies(bootstrap: str, topic: str, created: list[datetime]) -> None:
    """Records written now that carry events created at ``created`` (what `dlq replay`, `db
    republish` and a Debezium re-send append): the Kafka timestamp is the copy's, the router's
    ``created_at`` header the event's."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i, when in enumerate(created):
        headers = [(k, v) for k, v in router_headers(str(uuid.uuid4()), "Counted", "copy") if k != "created_at"]
        producer.produce(topic, key=b"a1", value=json.dumps({"seq": i}).encode(), partition=0,
                         headers=[*headers, ("created_at", when.isoformat().replace("+00:00", "Z").encode())])
    assert producer.flush(30) == 0


def test_replay_group_judges_copies_by_their_events_creation_not_the_copys_timestamp(settings, unique):
    """A copy of an event applied three days ago, appended to the log just now, is re-applied by a
    group whose markers live two days: the rewind that re-reads it is refused without `--force`,
    whether the copy is the first record re-read or one further on. Before the fix the plan looked
    at the first record's Kafka timestamp only (written just now: "safe")."""
    topic, group = f"outbox.event.rpcp{unique}", f"test-rpcp-{unique}"
    create_topic(settings.kafka_bootstrap, topic, 1)
    now = datetime.now(timezone.utc)
    produce_copies(settings.kafka_bootstrap, topic, [now - timedelta(days=3), now])
    commit_offset(settings.kafka_bootstrap, group, topic, 2)

    first = run_cli("replay", "--group", group, "--to", "earliest", "--marker-ttl", "2d", "--execute", "--yes")
    assert first.returncode == 1 and "dedupe markers live" in first.stderr, first.stdout + first.stderr

    produce_copies(settings.kafka_bootstrap, topic, [now, now - timedelta(days=3), now])
    commit_offset(settings.kafka_bootstrap, group, topic, 5)
    further = run_cli("replay", "--group", group, "--to", "2", "--marker-ttl", "2d", "--dry-run", "--json")
    assert further.returncode == 1 and json.loads(further.stdout)["refused"] is True, further.stdout + further.stderr
    assert "dedupe markers live" in further.stderr
    assert committed(settings.kafka_bootstrap, group, topic, 1) == {0: 5}

    fresh = invoke_json("replay", "--group", group, "--to", "4", "--marker-ttl", "2d", "--dry-run")
    assert fresh["refused"] is False, "the last copy's event is fresh"


@pytest.fixture(scope="module")
def dead_letters(settings, admin_redis_url):
    """Two groups dead-letter the same four poison records (decode, unknown type, handler, WRONGTYPE)
    of one topic through the real runtime; before them, a dead letter written three hours ago by
    an independent client (for --since)."""
    import redis

    unique = uuid.uuid4().hex[:10]
    agg = f"dl{unique}"
    topic, dlq = f"outbox.event.{agg}", f"outbox.event.{agg}.dlq"
    groups = (f"test-dl1-{unique}", f"test-dl2-{unique}")
    create_topic(settings.kafka_bootstrap, topic, 1)
    create_topic(settings.kafka_bootstrap, dlq, 1)
    old_id = str(uuid.uuid4())
    three_hours_ago = int((datetime.now(timezone.utc) - timedelta(hours=3)).timestamp() * 1000)
    producer = Producer({"bootstrap.servers": settings.kafka_bootstrap, "acks": "all"})
    producer.produce(dlq, key=b"a0", value=b"{}", partition=0, timestamp=three_hours_ago, headers=[
        *router_headers(old_id, "Counted", agg), ("postbox.error", b"an old failure"), ("postbox.error.class", b"DecodeError"),
        ("postbox.error.kind", b"permanent"), ("postbox.origin.topic", topic.encode()), ("postbox.origin.partition", b"0"),
        ("postbox.origin.offset", b"0"), ("postbox.attempts", b"1"), ("postbox.group", b"test-dl-old"),
        ("postbox.failed_at", b"2026-01-01T00:00:00.000Z")])
    assert producer.flush(30) == 0

    admin = redis.Redis.from_url(admin_redis_url)
    admin.set(f"{{{agg}:a1}}:str", "a string, so HSET fails with WRONGTYPE")
    ids = [str(uuid.uuid4()) for _ in range(5)]
    produce(settings.kafka_bootstrap, topic, [
        json_event(agg, "a1", "Counted", 0, event_id=ids[0], partition=0),
        (b"a1", b'{"seq": 1, garbage', router_headers(ids[1], "Counted", agg), 0),  # DecodeError
        json_event(agg, "a1", "Mystery", 2, event_id=ids[2], partition=0),
        json_event(agg, "a1", "Boom", 3, event_id=ids[3], partition=0),
        json_event(agg, "a1", "Clash", 4, event_id=ids[4], partition=0),
    ])
    runtimes = [ThreadedRuntime(strict, ConsumerConfig.load(group=g, topics=topic, handler_retries=0, batch_wait_ms=50)).start()
                for g in groups]
    try:
        for g in groups:
            wait_for(lambda g=g: committed(settings.kafka_bootstrap, g, topic, 1) == {0: 5}, 60, f"{g} at the end")
    finally:
        for r in runtimes:
            r.stop()
    yield {"topic": topic, "dlq": dlq, "groups": groups, "ids": ids, "old_id": old_id}
    admin.delete(f"{{{agg}:a1}}:str", f"{{{agg}:a1}}:seq", f"{{{agg}:a1}}:count", *(f"postbox:failures:{g}" for g in groups))
    admin.close()


def test_dlq_list_filters(dead_letters):
    """docs/incident.md, "Dead letters": `postbox dlq list [--topic T] [--error-class C] [--group G]
    [--event-id ID] [--since 2h]` lists them with ref, event, group, error class and error;
    `--error-class EffectFailed` or `--error-class WRONGTYPE` both select `EffectFailed:WRONGTYPE`;
    `--limit` keeps the newest."""
    d = dead_letters
    g1, g2 = d["groups"]
    ids = d["ids"]

    def listed(*args: str) -> dict:
        return invoke_json("dlq", "list", "--topic", d["topic"], *args)

    everything = listed()
    assert everything["topics"] == [d["dlq"]] and everything["complete"] is True and everything["total"] == 9
    assert {x["event_id"] for x in everything["dead_letters"]} == {d["old_id"], *ids[1:]}
    assert {x["ref"] for x in everything["dead_letters"]} == {f"{d['dlq']}:0:{o}" for o in range(9)}

    mine = listed("--group", g1)["dead_letters"]
    assert len(mine) == 4 and {x["group"] for x in mine} == {g1}
    assert {x["error_class"] for x in mine} == {"DecodeError", "UnknownEventType", "HandlerError:ValueError", "EffectFailed:WRONGTYPE"}
    for selector in ("EffectFailed", "WRONGTYPE", "EffectFailed:WRONGTYPE"):
        chosen = listed("--error-class", selector)["dead_letters"]
        assert {(x["group"], x["event_id"]) for x in chosen} == {(g1, ids[4]), (g2, ids[4])}, selector
    handler = listed("--error-class", "HandlerError", "--group", g2)["dead_letters"]
    assert [(x["event_id"], x["error_class"], x["attempts"]) for x in handler] == [(ids[3], "HandlerError:ValueError", 1)]
    by_id = listed("--event-id", ids[2])["dead_letters"]
    assert {x["group"] for x in by_id} == {g1, g2} and {x["error_class"] for x in by_id} == {"UnknownEventType"}
    recent = listed("--since", "2h")
    assert recent["total"] == 8 and d["old_id"] not in {x["event_id"] for x in recent["dead_letters"]}
    order = [x["dead_lettered_at"] for x in everything["dead_letters"]]
    assert order == sorted(order), "listed oldest first"
    newest = listed("--limit", "3")
    assert newest["total"] == 9 and newest["dead_letters"] == everything["dead_letters"][-3:]

    code, table = invoke("dlq", "list", "--topic", d["topic"], "--group", g1, "--output", "table")
    assert code == 0
    assert "dead letters (4 in" in table and f"{d['dlq']}:0:" in table and "UnknownEventType" in table


def test_dlq_show_by_ref_and_by_event_id(dead_letters):
    """docs/incident.md, "Dead letters": `postbox dlq show REF|EVENT_ID` prints one decoded (payload,
    headers, origin, attempts); an event id finds its dead letters in every group."""
    d = dead_letters
    g1, g2 = d["groups"]
    boom = d["ids"][3]
    (first,) = invoke_json("dlq", "list", "--topic", d["topic"], "--event-id", boom, "--group", g1)["dead_letters"]

    (shown,) = invoke_json("dlq", "show", first["ref"])["dead_letters"]
    assert shown["event_id"] == boom and shown["group"] == g1 and shown["error_class"] == "HandlerError:ValueError"
    assert shown["origin"] == {"topic": d["topic"], "partition": 0, "offset": 3} and shown["attempts"] == 1
    assert "boom on" in shown["error"]
    assert shown["record"]["value"]["payload"] == {"seq": 3}
    assert {h["key"] for h in shown["record"]["headers"]} >= {"id", "event_type", "postbox.error.class", "postbox.origin.offset"}

    both = invoke_json("dlq", "show", boom, "--topic", d["topic"])["dead_letters"]
    assert sorted(x["group"] for x in both) == sorted([g1, g2])

    code, text = invoke("dlq", "show", first["ref"])
    assert code == 0
    assert first["ref"] in text and "HandlerError:ValueError" in text
    assert f"origin {d['topic']}[0]@3" in text and f"group {g1}" in text
