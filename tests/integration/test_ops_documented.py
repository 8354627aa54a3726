"""Documented operations commands that had no test of their success path (issue 18): `connector
restart` / `connector apply`, a healthy `doctor`, `lag --max-lag`, `postbox env`,
`POSTBOX_STATE_DIR` and `demo --chaos`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from datetime import timedelta
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from postbox.effects import groups as group_registry
from postbox.resources import CONNECTOR_TEMPLATE
from tests.integration.incident_support import CLI, ROOT, run_cli
from tests.support.cli import audit_records, invoke, invoke_json
from tests.support.consumers import commit_offset, create_topic, json_event, produce
from tests.support.kafka import read_until
from tests.support.outbox_rows import insert_event
from tests.support.redis_servers import RedisServer

# disruptive (runs alone, after the tests that share the stack): restarts and reconfigures the
# connector, and expects `postbox doctor` to find the whole stack healthy.
pytestmark = [pytest.mark.integration, pytest.mark.disruptive]
URL_VARS = ("POSTBOX_DATABASE_URL", "POSTBOX_KAFKA_BOOTSTRAP", "POSTBOX_REDIS_URL", "POSTBOX_CONNECT_URL")


def audited(bootstrap: str, command: str, audit_id: str) -> dict:
    """The audit record with ``audit_id``, read from the audit topic itself."""
    (record,) = [r for r in audit_records(bootstrap) if r.get("id") == audit_id]
    assert record["command"] == command
    return record


def test_connector_restart_and_apply_succeed_audited_and_the_pipeline_still_flows(settings, pg_conn, unique, tmp_path):
    """docs/incident.md, Connector: `postbox connector restart [--wait 60]` "restarts connector and
    tasks, waits for RUNNING"; `postbox connector apply [--file ...]` "create or update, lists the
    settings that change, no-op when unchanged"; Audit trail: both append a record to
    `postbox.audit`. On the stack's own connector, which is left as it was and RUNNING: one
    setting changed from a copy of the file, then the original applied back; an event emitted
    afterwards still reaches its topic."""
    restarted = invoke_json("connector", "restart", "--yes", "--wait", "90")
    assert restarted["outcome"] == "restarted" and restarted["after"] == "RUNNING", restarted
    assert audited(settings.kafka_bootstrap, "connector restart", restarted["audit"]["id"])["target"] == restarted["name"]

    original = CONNECTOR_TEMPLATE
    unchanged = invoke_json("connector", "apply", "--file", str(original), "--yes")
    assert unchanged["outcome"] == "unchanged" and unchanged["changed"] == [] and unchanged["audit"] is None

    changed_file = tmp_path / "outbox.json"
    data = json.loads(original.read_text())
    data["config"]["poll.interval.ms"] = "20"
    changed_file.write_text(json.dumps(data))
    try:
        updated = invoke_json("connector", "apply", "--file", str(changed_file), "--yes", "--wait", "90")
        assert updated["changed"] == ["poll.interval.ms"] and updated["outcome"] != "unchanged", updated
        record = audited(settings.kafka_bootstrap, "connector apply", updated["audit"]["id"])
        assert record["details"]["changed"] == ["poll.interval.ms"]
        status = invoke_json("connector", "status")
        assert status["config"]["poll.interval.ms"] == "20" and status["running"] is True
    finally:
        back = invoke_json("connector", "apply", "--file", str(original), "--yes", "--wait", "90")
    assert back["changed"] == ["poll.interval.ms"]
    status = invoke_json("connector", "status")
    assert status["config"]["poll.interval.ms"] == "10" and status["state"] == "RUNNING"
    assert all(t["state"] == "RUNNING" for t in status["tasks"])

    event_id = insert_event(pg_conn, f"conn{unique}", "a1", "Ping", b"{}")
    pg_conn.commit()
    records = read_until(settings.kafka_bootstrap, f"outbox.event.conn{unique}", lambda rs: any(r.event_id == event_id for r in rs))
    assert [r.event_id for r in records] == [event_id]


def test_healthy_doctor_exits_0(settings, unique):
    """docs/incident.md, First look: `postbox doctor` — "every precondition, one line each"; exit
    code 0 when no check fails (1 when one does). A healthy pipeline: the stack's PostgreSQL,
    Kafka and Connect, a Redis with AOF `appendfsync always`, and a consumer group whose marker TTL
    (published in the group registry) outlives its topic's redelivery window (a day of retention,
    hourly segments, the broker's 7-day offsets retention). Then one group with
    a one-hour TTL: the same doctor exits 1 on exactly that check."""
    server = RedisServer().start()
    client = server.client()
    topic, group = f"outbox.event.doc{unique}", f"test-doc-{unique}"
    admin = AdminClient({"bootstrap.servers": settings.kafka_bootstrap})  # a day of retention, hourly segments
    admin.create_topics([NewTopic(topic, 1, 1, config={"retention.ms": "86400000", "segment.ms": "3600000"})])[topic].result(timeout=30)
    commit_offset(settings.kafka_bootstrap, group, topic, 0)
    group_registry.publish(client, group, timedelta(days=8))
    try:
        code, out = invoke("doctor", "--redis-url", server.url)
        report = invoke_json("doctor", "--redis-url", server.url)
        assert code == 0, out
        assert report["ok"] is True
        statuses = {c["check"]: c["status"] for c in report["checks"]}
        assert {"postgres reachable", "wal_level", "replication slot", "publication", "connector", "kafka reachable",
                "redis reachable", "redis persistence", "scripts loadable", "schemas compatible"} <= set(statuses), statuses
        assert statuses[f"marker TTL {group}"] == "ok"
        assert [n for n, s in statuses.items() if s == "fail"] == [], statuses
        assert "0 failed" in out

        short = f"test-doc-short-{unique}"
        commit_offset(settings.kafka_bootstrap, short, topic, 0)
        group_registry.publish(client, short, timedelta(hours=1))
        broken = invoke_json("doctor", "--redis-url", server.url, expect=1)
        assert [c["check"] for c in broken["checks"] if c["status"] == "fail"] == [f"marker TTL {short}"]
    finally:
        client.close()
        server.stop()


def test_lag_max_lag_exit_code(settings, unique):
    """docs/incident.md, "What is behind?": "`--max-lag N` exits 1 when a group is further behind
    (for cron/alerts)" — and 0 when it is not; the JSON says `max_lag_exceeded`."""
    topic, group = f"outbox.event.lag{unique}", f"test-lag-{unique}"
    create_topic(settings.kafka_bootstrap, topic, 1)
    produce(settings.kafka_bootstrap, topic, [json_event(f"lag{unique}", "a1", "Counted", i, partition=0) for i in range(5)])
    commit_offset(settings.kafka_bootstrap, group, topic, 2)
    within = invoke_json("lag", group, "--max-lag", "3")
    assert within["max_lag_exceeded"] is False and within["groups"][0]["lag"] == 3
    over = invoke_json("lag", group, "--max-lag", "2", expect=1)
    assert over["max_lag_exceeded"] is True
    code, text = invoke("lag", group, "--max-lag", "2")
    assert code == 1 and group in text
    assert invoke("lag", group, "--max-lag", "3")[0] == 0


def test_postbox_env_points_a_shell_at_the_stack(tmp_path):
    """README, The local stack: `eval "$(postbox env)"` exports POSTBOX_DATABASE_URL /
    _KAFKA_BOOTSTRAP / _REDIS_URL / _CONNECT_URL. A shell without them evals the output and a
    program started from it reaches every service, as the roles the stack made for applications
    (PostgreSQL `postbox_app`, Redis ACL user `postbox_consumer`)."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import json, os, httpx, psycopg, redis\n"
        "from confluent_kafka.admin import AdminClient\n"
        "with psycopg.connect(os.environ['POSTBOX_DATABASE_URL']) as c:\n"
        "    pg = c.execute('SELECT current_user').fetchone()[0]\n"
        "r = redis.Redis.from_url(os.environ['POSTBOX_REDIS_URL'])\n"
        "assert r.ping()\n"
        "try:\n"
        "    r.config_get('maxmemory'); limited = False\n"
        "except redis.exceptions.NoPermissionError:\n"
        "    limited = True\n"
        "who = r.connection_pool.connection_kwargs.get('username')\n"
        "topics = AdminClient({'bootstrap.servers': os.environ['POSTBOX_KAFKA_BOOTSTRAP']}).list_topics(timeout=10).topics\n"
        "connectors = httpx.get(os.environ['POSTBOX_CONNECT_URL'] + '/connectors', timeout=10).json()\n"
        "print(json.dumps({'pg': pg, 'redis': who, 'limited': limited, 'kafka': len(topics), 'connectors': connectors}))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in URL_VARS}
    command = f'eval "$({" ".join(CLI[:2])} \'{CLI[2]}\' env)" && {CLI[0]} {probe}'
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["pg"] == "postbox_app" and seen["redis"] == "postbox_consumer" and seen["limited"] is True
    assert seen["kafka"] > 0 and "postbox-outbox" in seen["connectors"]


# (if the setting were ignored, `postbox down` would stop the shared stack)
def test_postbox_state_dir_moves_the_state_folder(tmp_path):
    """README, The local stack: one state folder (`.postbox/`), "`POSTBOX_STATE_DIR` moves it". With
    it pointing at another folder, `status` reports that folder, its logs and no running process,
    `env` reads that folder's secrets, and `down` stops nothing of the stack in `.postbox/`."""
    other = tmp_path / "other-state"
    other.mkdir()
    (other / "secrets.env").write_text("POSTBOX_APP_PASSWORD=app-pw-of-the-other-stack\n")
    moved = {"POSTBOX_STATE_DIR": str(other)}

    status = json.loads(run_cli("status", "--json", env=moved).stdout)
    assert Path(status["state_dir"]) == other.resolve()
    for name in ("postgres", "redis", "kafka", "connect"):
        assert status[name]["state"] == "stopped", status[name]
        assert Path(status[name]["log"]).is_relative_to(other.resolve()), status[name]["log"]
    exports = run_cli("env", env={**moved, **{k: "" for k in URL_VARS}}).stdout
    assert "postbox_app:app-pw-of-the-other-stack@" in exports

    down = run_cli("down", env=moved)
    assert down.returncode == 0, down.stderr
    ours = run_cli("status", "--json")
    assert ours.returncode == 0, ours.stdout
    state = json.loads(ours.stdout)
    assert all(state[n]["state"] == "running" for n in ("postgres", "redis", "kafka", "connect")), state
    assert state["connector"]["state"] == "RUNNING"
    shutil.rmtree(other, ignore_errors=True)


# (SIGKILLs the stack's Kafka Connect worker, and restarts it)
def test_demo_chaos_passes():
    """docs/demo.md: `postbox demo --chaos` — "the payment and inventory consumers are SIGKILLed
    mid-batch and restarted, and the Kafka Connect worker is SIGKILLed and restarted"; every
    invariant holds and it exits 0. Kept small for CI (60 orders: its time is the Connect restart and the killed members' session timeouts); the result names the kills."""
    done = subprocess.run([*CLI, "demo", "--chaos", "--orders", "60", "--seed", "11", "--json"],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout)
    assert result["passed"] is True and all(c["ok"] for c in result["checks"])
    kills = result["summary"]["chaos"]
    for victim in ("payment consumer", "inventory consumer", "Connect worker"):
        assert f"SIGKILL {victim}" in kills, kills
    assert "verdict: PASS" in done.stderr
