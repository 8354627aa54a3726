"""`postbox reconcile` against the real stack: each gap made for real, then seen in the report.

One journey on one aggregate type and one group of its own (a consumer is slow to start):
an event applied, one dead-lettered (WRONGTYPE), one re-sent by another client (same id twice
in Kafka: applied once); then, with the consumer stopped, one event the group's offsets are moved
past (missing in Redis); then that event's and the first event's markers deleted, read with a
marker TTL that no longer covers them (unknown: marker gone, never applied). And events written
to an outbox whose pipeline has no connector (never published: missing in Kafka), and to one whose
connector was stopped, its slot dropped and its offsets reset (the gap: missing in Kafka). And a group on
a private Redis whose admin turned eviction on after the consumer applied: the evicted markers are
unknown, never missing nor applied. And a handler with its own routing key, whose markers no
record's key tells: found by the SCAN, applied.

Not disruptive: its own aggregate types, topics, groups, pipeline schemas and connector; the shared
connector is never touched.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg
import pytest

from postbox.db import init_database
from postbox.outbox import uuid7
from postbox.pipelines import Pipeline
from postbox.settings import Settings
from tests.integration.incident_support import Consumer, cli_json, insert, run_cli, wait_for
from tests.support.consumers import commit_offset, committed
from tests.support.independent import produce_independently
from tests.support.kafka import read_until
from tests.support.redis_servers import RedisServer

pytestmark = pytest.mark.integration


def _iso(when: datetime) -> str:
    return when.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def test_reconcile_finds_each_gap_hop_by_hop(settings: Settings, pg_conn, redis_client, unique: str, tmp_path: Path) -> None:
    agg, group = f"rec{unique}", f"recg{unique}"
    topic = f"outbox.event.{agg}"
    since = _iso(datetime.now(timezone.utc) - timedelta(seconds=2))
    redis_client.set(f"{{{agg}:a2}}:str", "a string, so HSET fails with WRONGTYPE")
    e1 = insert(pg_conn, agg, "a1", "Counted", {"seq": 1})
    e2 = insert(pg_conn, agg, "a2", "Clash", {"seq": 2})
    (first,) = [r for r in read_until(settings.kafka_bootstrap, topic, lambda rs: len(rs) >= 2) if r.event_id == e1]
    # a re-send: the same record (same id header) once more, by a client postbox does not use
    produce_independently(settings.kafka_bootstrap, topic, [(first.key, first.value, [(k, v) for k, v in first.headers.items() if v is not None], first.partition)])
    consumer = Consumer(group, topic, tmp_path / "consumer.log").start()
    try:
        def caught_up() -> bool:
            offsets = committed(settings.kafka_bootstrap, group, topic, 3)
            return sum(o for o in offsets.values() if o > 0) >= 3
        wait_for(caught_up, 90, f"group {group} to consume the three records\n{consumer.logs()}")
        read_until(settings.kafka_bootstrap, f"{topic}.dlq", lambda rs: len(rs) >= 1, timeout=30)
    finally:
        consumer.stop()
    assert redis_client.lrange(f"{{{agg}:a1}}:seq", 0, -1) == [b"1"], "the re-sent copy was applied once"

    # -- the group's offsets moved past a record it never applied --------------------------------
    e4 = insert(pg_conn, agg, "a4", "Counted", {"seq": 4})
    (rec4,) = [r for r in read_until(settings.kafka_bootstrap, topic, lambda rs: any(r.event_id == e4 for r in rs)) if r.event_id == e4]
    commit_offset(settings.kafka_bootstrap, group, topic, rec4.offset + 1, rec4.partition)

    done = run_cli("reconcile", "--since", since, "--aggregate-type", agg, "--group", group, "--json")
    assert done.returncode == 1, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["events"] == 3 and report["outbox"]["rows"] == 3
    assert report["kafka"] == {"events": 3, "records": 4, "doubled": 1, "missing": 0, "not_in_outbox": 0}
    (g,) = report["groups"]
    assert (g["group"], g["applied"], g["dead_lettered"], g["missing"], g["marker_gone"], g["pending"]) == (group, 1, 1, 1, 0, 0), g
    assert g["doubled_applied_once"] == 1
    by_kind = {(f["kind"], f["event_id"]): f for f in report["findings"]}
    assert by_kind[("doubled", e1)]["last_seen"].count(f"{topic}[{first.partition}]@") == 2
    missing = by_kind[("missing", e4)]
    assert missing["hop"] == group and missing["last_seen"].startswith(f"{topic}[{rec4.partition}]@{rec4.offset}")
    assert missing["fix"].startswith(f"postbox replay --group {group} --topic {topic} --to ")
    assert by_kind[("dead-lettered", e2)]["fix"].startswith(f"postbox dlq replay --topic {topic} --event-id {e2}")
    assert report["audit"]["command"] == "reconcile" and report["audit"]["outcome"] == "missing 1"

    # piped: TSV, whole ids, the fixes on their lines
    piped = run_cli("reconcile", "--since", since, "--aggregate-type", agg, "--group", group)
    assert piped.returncode == 1 and f"{e4}\tmissing\t{group}\t" in piped.stdout, piped.stdout[-2000:]

    # -- markers gone: deleted, and a TTL that cannot prove the events any more ---------------------
    for key in redis_client.scan_iter(match=f"postbox:*:seen:{group}:*"):
        if key.decode().endswith(e1):
            redis_client.delete(key)
    gone = cli_json("reconcile", "--since", since, "--aggregate-type", agg, "--group", group, "--marker-ttl", "1s", expect=3)
    (g,) = gone["groups"]
    assert (g["applied"], g["marker_gone"], g["missing"], g["dead_lettered"]) == (0, 2, 0, 1), g
    assert {f["event_id"] for f in gone["findings"] if f["kind"] == "unknown: marker gone"} == {e1, e4}


def test_rows_of_a_pipeline_without_a_connector_are_missing_in_kafka(
    settings: Settings, admin_database_url: str, admin_conn, unique: str,
) -> None:
    pipeline = Pipeline(f"r{unique}")
    init_database(admin_database_url, app_password=None, cdc_password=None, pipeline=pipeline)
    try:
        since = _iso(datetime.now(timezone.utc) - timedelta(seconds=2))
        ids = [str(uuid7()) for _ in range(3)]
        with psycopg.connect(admin_database_url) as conn, conn.transaction():
            for n, eid in enumerate(ids):
                conn.execute(f"INSERT INTO {pipeline.table} (id, aggregate_type, aggregate_id, event_type, payload) VALUES (%s, %s, 'a1', 'Counted', %s)",
                             (eid, f"recm{unique}", json.dumps({"seq": n}).encode()))
        report = cli_json("reconcile", "--since", since, "--pipeline", pipeline.name, "--aggregate-type", f"recm{unique}",
                          "--database-url", admin_database_url, expect=1)  # fmt: skip
        assert report["outbox"]["rows"] == 3 and report["kafka"]["missing"] == 3 and report["missing"] == 3
        found = [f for f in report["findings"] if f["kind"] == "missing" and f["hop"] == "kafka"]
        assert [f["event_id"] for f in found] == ids
        assert found[0]["fix"].startswith("postbox db republish --since ") and found[0]["fix"].endswith(f"--pipeline {pipeline.name}")
    finally:
        admin_conn.execute(f"DROP SCHEMA IF EXISTS {pipeline.schema} CASCADE")
        admin_conn.execute(f"DROP PUBLICATION IF EXISTS {pipeline.publication}")


def test_rows_written_while_the_connector_was_stopped_and_its_slot_dropped_are_missing_in_kafka(
    settings: Settings, admin_database_url: str, admin_conn, unique: str,
) -> None:
    """What Debezium users hit: the connector stopped, its slot dropped, rows committed meanwhile;
    Debezium then refuses its stored offset ("no longer available on the server"), the offsets are
    reset (Connect's offsets API) and the connector resumes on a new slot that starts at the WAL's
    end. The rows of the gap never reach Kafka, silently; those before and after do. A pipeline of
    its own (schema, publication, slot, connector) on the shared Connect; the shared connector is
    never touched."""
    import httpx

    from postbox.connect_client import ConnectClient

    pipeline = Pipeline(f"s{unique}")
    init_database(admin_database_url, app_password=None, cdc_password=None, pipeline=pipeline)
    aggregate = f"recs{unique}"

    def write(count: int) -> list[str]:
        ids = [str(uuid7()) for _ in range(count)]
        with psycopg.connect(admin_database_url) as conn, conn.transaction():
            for n, eid in enumerate(ids):
                conn.execute(f"INSERT INTO {pipeline.table} (id, aggregate_type, aggregate_id, event_type, payload) VALUES (%s, %s, 'a1', 'Counted', %s)",
                             (eid, aggregate, json.dumps({"seq": n}).encode()))
        return ids

    def reconcile() -> dict:
        return cli_json("reconcile", "--since", since, "--pipeline", pipeline.name, "--aggregate-type", aggregate,
                        "--database-url", admin_database_url, expect=(0, 1))  # fmt: skip

    def connector_up() -> None:
        done = run_cli("connector", "apply", "--pipeline", pipeline.name, "--yes", "--wait", "120", timeout=180)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]

    try:
        since = _iso(datetime.now(timezone.utc) - timedelta(seconds=2))
        connector_up()
        before = write(2)
        wait_for(lambda: reconcile()["kafka"]["events"] == 2, 90, "the rows before the gap in Kafka")
        connector = f"{settings.connect_url}/connectors/{pipeline.connector}"
        httpx.put(f"{connector}/stop", timeout=30).raise_for_status()
        wait_for(lambda: httpx.get(f"{connector}/status", timeout=10).json()["connector"]["state"] == "STOPPED", 60, "connector stopped")
        wait_for(lambda: _drop_slot(admin_conn, pipeline.slot), 60, f"slot {pipeline.slot} released and dropped")
        gap = write(3)
        httpx.delete(f"{connector}/offsets", timeout=60).raise_for_status()
        httpx.put(f"{connector}/resume", timeout=30).raise_for_status()
        with ConnectClient(settings.connect_url, timeout=30) as client:
            client.wait_running(pipeline.connector, 120)
        after = write(2)
        report = wait_for(lambda: (r := reconcile())["kafka"]["events"] == 4 and r, 90, "the rows after the gap in Kafka")
        assert report["outbox"]["rows"] == 7 and report["kafka"]["missing"] == 3 and report["missing"] == 3
        missing = [f["event_id"] for f in report["findings"] if f["kind"] == "missing" and f["hop"] == "kafka"]
        assert missing == gap, (missing, gap, before, after)
    finally:
        with ConnectClient(settings.connect_url, timeout=30) as client:
            client.delete(pipeline.connector)
        wait_for(lambda: _drop_slot(admin_conn, pipeline.slot), 60, f"slot {pipeline.slot} dropped")
        admin_conn.execute(f"DROP SCHEMA IF EXISTS {pipeline.schema} CASCADE")
        admin_conn.execute(f"DROP PUBLICATION IF EXISTS {pipeline.publication}")


def _drop_slot(admin_conn, slot: str) -> bool:
    """Drop ``slot`` once no connector holds it; True when it is gone."""
    row = admin_conn.execute("SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone()
    if row is None:
        return True
    if row[0]:
        return False
    admin_conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    return True


def _evict_markers(client, group: str) -> int:
    """What an admin does to a Redis the consumer already wrote to: an evicting policy and a
    maxmemory just above what it holds (the consumer refuses such a Redis at start, not later),
    then writes until every marker of ``group`` is evicted. Fillers live longer than a marker, so
    ``volatile-ttl`` takes the markers first. Returns INFO's evicted_keys."""
    client.config_set("maxmemory-policy", "volatile-ttl")
    client.config_set("maxmemory", int(client.info("memory")["used_memory"]) + 2 * 1024 * 1024)
    filler = b"x" * 4096
    for batch in range(200):
        pipe = client.pipeline(transaction=False)
        for n in range(500):
            pipe.set(f"filler:{batch}:{n}", filler, ex=30 * 86400)
        pipe.execute()
        if not list(client.scan_iter(match=f"postbox:*:seen:{group}:*", count=10_000)):
            break
    return int(client.info("stats")["evicted_keys"])


def test_markers_evicted_by_redis_are_unknown_never_missing_nor_applied(settings: Settings, pg_conn, unique: str, tmp_path: Path) -> None:
    agg, group = f"reve{unique}", f"reveg{unique}"
    topic = f"outbox.event.{agg}"
    since = _iso(datetime.now(timezone.utc) - timedelta(seconds=2))
    with RedisServer() as server:
        client = server.client()
        applied = [insert(pg_conn, agg, f"a{n}", "Counted", {"seq": n}) for n in range(3)]
        read_until(settings.kafka_bootstrap, topic, lambda rs: len(rs) >= 3)
        consumer = Consumer(group, topic, tmp_path / "consumer.log", env={"POSTBOX_REDIS_URL": server.url}).start()
        try:
            wait_for(lambda: sum(o for o in committed(settings.kafka_bootstrap, group, topic, 3).values() if o > 0) >= 3, 90,
                     f"group {group} to apply the three records\n{consumer.logs()}")  # fmt: skip
        finally:
            consumer.stop()
        assert len(list(client.scan_iter(match=f"postbox:*:seen:{group}:*"))) == 3, "the consumer left one marker per event"
        fresh = cli_json("reconcile", "--since", since, "--aggregate-type", agg, "--group", group, "--redis-url", server.url, expect=0)
        assert fresh["groups"][0]["applied"] == 3 and fresh["unknown"] == 0, fresh["groups"]
        later = insert(pg_conn, agg, "a9", "Counted", {"seq": 9})  # never consumed: pending, whatever Redis lost
        read_until(settings.kafka_bootstrap, topic, lambda rs: any(r.event_id == later for r in rs))

        evicted = _evict_markers(client, group)
        assert evicted > 0 and not list(client.scan_iter(match=f"postbox:*:seen:{group}:*")), evicted
        client.config_set("maxmemory-policy", "noeviction")  # put back after the incident: the markers stay gone

        done = run_cli("reconcile", "--since", since, "--aggregate-type", agg, "--group", group, "--redis-url", server.url, "--json")
        piped = run_cli("reconcile", "--since", since, "--aggregate-type", agg, "--group", group, "--redis-url", server.url)
    assert done.returncode == 3, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads(done.stdout)
    (g,) = report["groups"]
    assert (g["applied"], g["missing"], g["marker_gone"], g["pending"]) == (0, 0, 3, 1), g
    assert report["missing"] == 0 and report["unknown"] == 3 and report["exit_code"] == 3
    gone = {f["event_id"]: f for f in report["findings"] if f["kind"] == "unknown: marker gone"}
    assert set(gone) == set(applied)
    for f in gone.values():
        assert f"Redis evicted {evicted:,} key(s)" in f["last_seen"], f
        assert f["fix"].startswith(f"postbox trace {f['event_id']}") and f"{{{agg}:" in f["fix"], f
    assert report["audit"]["outcome"] == "unknown 3"
    assert piped.returncode == 3 and f"{applied[0]}\tunknown: marker gone\t{group}\t" in piped.stdout, piped.stdout[-2000:]


def test_markers_under_a_handlers_own_routing_key_are_found(settings: Settings, pg_conn, unique: str, tmp_path: Path) -> None:
    agg, group = f"rerk{unique}", f"rerkg{unique}"
    topic = f"outbox.event.{agg}"
    since = _iso(datetime.now(timezone.utc) - timedelta(seconds=2))
    with RedisServer() as server:
        client = server.client()
        ids = [insert(pg_conn, agg, f"a{n}", "RoutedCounted", {"seq": n, "customer": f"c{n % 2}"}) for n in range(4)]
        read_until(settings.kafka_bootstrap, topic, lambda rs: len(rs) >= 4)
        consumer = Consumer(group, topic, tmp_path / "consumer.log", env={"POSTBOX_REDIS_URL": server.url}).start()
        try:
            wait_for(lambda: sum(o for o in committed(settings.kafka_bootstrap, group, topic, 3).values() if o > 0) >= 4, 90,
                     f"group {group} to apply the four records\n{consumer.logs()}")  # fmt: skip
        finally:
            consumer.stop()
        markers = [k.decode() for k in client.scan_iter(match=f"postbox:*:seen:{group}:*")]
        assert {k.rsplit(":", 1)[1] for k in markers} == set(ids) and all(k.startswith("postbox:{customer:c") for k in markers), markers
        report = cli_json("reconcile", "--since", since, "--aggregate-type", agg, "--group", group, "--redis-url", server.url, expect=0)
    (g,) = report["groups"]
    assert (g["applied"], g["missing"], g["marker_gone"]) == (4, 0, 0), (g, report["findings"])
    assert report["events"] == 4 and not report["findings"], report["findings"]
