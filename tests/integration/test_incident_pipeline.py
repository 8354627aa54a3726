"""Acceptance of the incident CLI against the real stack and the real consumer runtime.

One journey (a consumer is slow to start, so the phases share it):
1. a consumer group applies one event and dead-letters another (WRONGTYPE) → `trace` says
   applied / dead-lettered with their locations; `lag` is zero;
2. the consumer stops, a third event arrives → `trace` says waiting, `lag` is non-zero; an unknown id
   is unknown; `replay --group` refuses while the group has members and plans once it has none;
3. the cause is fixed and `dlq replay` runs twice (after a dry run that sends nothing) → once the
   consumer is back the dead-lettered event is applied exactly once, `lag` is zero again, and
   `audit` lists both replays.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from postbox.outbox import uuid7
from postbox.settings import Settings
from tests.integration.incident_support import Consumer, cli_json, insert, run_cli, wait_for
from tests.support.kafka import read_until

pytestmark = pytest.mark.integration


def lag_of(group: str) -> dict:
    data = cli_json("lag", group, expect=(0, 1))
    (entry,) = [g for g in data["groups"] if g["group"] == group]
    return entry


def committed_all(group: str, topic: str, expected_end: int):
    def check():
        try:
            entry = lag_of(group)
        except (AssertionError, ValueError):  # not known yet: the group has not joined
            return False
        parts = [p for p in entry["partitions"] if p["topic"] == topic]
        return entry if parts and sum(p["end"] for p in parts) >= expected_end and entry["lag"] == 0 else False
    return check


def test_trace_lag_dlq_replay_journey(settings: Settings, pg_conn, redis_client, unique: str, tmp_path: Path) -> None:
    agg, group = f"inc{unique}", f"incg{unique}"
    topic, dlq = f"outbox.event.{agg}", f"outbox.event.{agg}.dlq"
    redis_client.set(f"{{{agg}:a2}}:str", "a string, so HSET fails with WRONGTYPE")
    e1 = insert(pg_conn, agg, "a1", "Counted", {"seq": 1})
    e2 = insert(pg_conn, agg, "a2", "Clash", {"seq": 2})
    read_until(settings.kafka_bootstrap, topic, lambda rs: len(rs) >= 2)
    # markers live 2 days in this group (published at its start): trace reads that, not the 8-day default
    consumer = Consumer(group, topic, tmp_path / "consumer.log", env={"POSTBOX_MARKER_TTL": "2d"}).start()
    try:
        wait_for(committed_all(group, topic, 2), 90, f"group {group} to consume both events\n{consumer.logs()}")
        read_until(settings.kafka_bootstrap, dlq, lambda rs: len(rs) >= 1, timeout=30)

        # -- 1. applied and dead-lettered --------------------------------------------------------
        t1 = cli_json("trace", e1)
        assert t1["status"] == "applied", t1["verdict"]
        assert t1["verdict"].startswith(f"applied by {group} at ~")
        assert t1["outbox"]["state"] == "found" and t1["outbox"]["aggregate_id"] == "a1"
        rec = t1["kafka"]["record"]
        assert rec["topic"] == topic and rec["key"] == "a1" and rec["event_type"] == "Counted"
        (g1,) = t1["groups"]
        assert g1["group"] == group and g1["status"] == "applied" and g1["consumed"] is True
        assert g1["marker"]["key"] == f"postbox:{{{agg}:a1}}:seen:{group}:{e1}" and g1["marker"]["found_by"] == "aggregate"
        # the apply time is estimated from the marker's remaining TTL and the group's published TTL
        # (found in review: with the 8-day default it read "applied ~6 days ago" for a 2-day group)
        applied = datetime.fromisoformat(g1["marker"]["applied_at_estimate"].replace("Z", "+00:00"))
        assert abs(datetime.now(timezone.utc) - applied) < timedelta(minutes=5), g1["marker"]

        t2 = cli_json("trace", e2, expect=1)
        assert t2["status"] == "dead-lettered"
        assert t2["verdict"].startswith(f"dead-lettered by {group}: EffectFailed:WRONGTYPE"), t2["verdict"]
        (g2,) = t2["groups"]
        assert g2["dead_letters"] and "WRONGTYPE" in g2["dead_letters"][0]["error"]
        # the group's verdict is in the marker: failed, its dead letter acknowledged (no apply time)
        assert g2["marker"]["verdict"]["dead_letter"] == "acknowledged" and g2["marker"]["applied_at_estimate"] is None, g2["marker"]
        assert g2["marker"]["verdict"]["error_class"] == "EffectFailed:WRONGTYPE"
        assert g2["failures"], "the engine recorded the failure in the group's failure stream"
        (d2,) = t2["dead_letters"]
        assert d2["dlq_topic"] == dlq and d2["origin"] == {"topic": topic, "partition": t2["kafka"]["record"]["partition"],
                                                          "offset": t2["kafka"]["record"]["offset"]}
        assert lag_of(group)["lag"] == 0
    finally:
        consumer.stop()

    # -- 2. consumer stopped: waiting, lag, unknown id, replay refuses/plans ----------------------
    e3 = insert(pg_conn, agg, "a3", "Counted", {"seq": 3})
    read_until(settings.kafka_bootstrap, topic, lambda rs: any(r.event_id == e3 for r in rs))
    def stopped_and_behind():
        e = lag_of(group)
        return e if e["lag"] > 0 and e["members"] == 0 else False

    entry = wait_for(stopped_and_behind, 60, "lag with no members")
    assert entry["lag"] == 1 and entry["oldest_unconsumed_age_seconds"] is not None
    lag_all = cli_json("lag")
    assert lag_all["connector"]["state"] == "RUNNING" and isinstance(lag_all["slot"]["lag_bytes"], int)

    t3 = cli_json("trace", e3)
    assert t3["status"] == "waiting"
    part = t3["kafka"]["record"]["partition"]
    assert t3["verdict"] == f"waiting: group {group} is 1 behind on partition {part} (no members: its consumers are stopped)"

    ghost = str(uuid7())
    t4 = cli_json("trace", ghost, expect=1)
    assert t4["status"] == "unknown" and t4["kafka"]["record"] is None and t4["outbox"]["state"] == "absent"
    assert t4["verdict"].startswith(f"unknown: event {ghost} is not in the outbox or in Kafka")

    plan = cli_json("replay", "--group", group, "--to", "earliest", "--dry-run")
    assert plan["reconsumed"] == 2 and plan["applied"] is False and not plan["refused"]

    # -- 3. fix the cause, replay the dead letter twice ---------------------------------------------
    redis_client.delete(f"{{{agg}:a2}}:str")
    dry = cli_json("dlq", "replay", "--topic", topic, "--event-id", e2)
    assert dry["dry_run"] is True and dry["summary"]["ready"] == 1 and dry["audit"] is None
    assert dry["items"][0]["to"]["topic"] == topic
    assert dry["items"][0]["applied_by"] == [], "#15.1: no group has applied e2 yet (its effect failed)"
    ends_before = {p["partition"]: p["latest"] for t in cli_json("topics")["topics"] if t["topic"] == topic for p in t["partitions"]}
    for _ in range(2):
        sent = cli_json("dlq", "replay", "--topic", topic, "--event-id", e2, "--execute", "--yes")
        assert sent["summary"]["sent"] == 1 and sent["audit"]["command"] == "dlq replay"
        assert sent["items"][0]["sent"]["topic"] == topic
    ends_after = {p["partition"]: p["latest"] for t in cli_json("topics")["topics"] if t["topic"] == topic for p in t["partitions"]}
    assert sum(ends_after.values()) - sum(ends_before.values()) == 2  # the dry run sent nothing

    consumer = Consumer(group, topic, tmp_path / "consumer2.log").start()
    try:
        wait_for(committed_all(group, topic, 5), 90, f"group {group} to catch up\n{consumer.logs()}")
        assert redis_client.lrange(f"{{{agg}:a2}}:seq", 0, -1) == [b"2"]  # applied exactly once
        assert redis_client.lrange(f"{{{agg}:a1}}:seq", 0, -1) == [b"1"]
        assert redis_client.lrange(f"{{{agg}:a3}}:seq", 0, -1) == [b"3"]
        t2b = cli_json("trace", e2)
        assert t2b["status"] == "applied" and "replayed" in t2b["verdict"]
        assert len(t2b["dead_letters"]) == 1  # the replays dead-lettered nothing new
        # #15.1 "say what happened": a replay now would be skipped by the group that applied it
        again = cli_json("dlq", "replay", "--topic", topic, "--event-id", e2)
        assert [a["group"] for a in again["items"][0]["applied_by"]] == [group] and again["already_applied"] == 1
        assert "already applied by a group" in run_cli("dlq", "replay", "--topic", topic, "--event-id", e2).stderr

        refused = run_cli("replay", "--group", group, "--to", "earliest", "--execute", "--yes")
        assert refused.returncode == 1 and "member" in refused.stderr and "Traceback" not in refused.stderr
    finally:
        consumer.stop()
    assert lag_of(group)["lag"] == 0

    audit = cli_json("audit", "--command", "dlq replay", "--limit", "500")
    mine = [r for r in audit["records"] if r["target"] == topic]
    assert len(mine) == 2 and all(r["count"] == 1 and r["user"] and r["host"] for r in mine)
    assert uuid.UUID(mine[0]["id"])
