"""Documented writer behaviours that had no test (issue 18): `outbox.transaction()` without a
connection, the traceparent of the current OpenTelemetry span, and `postbox db retention`'s locks
(one run at a time; every lock bounded by `--lock-timeout` and retried, so emits never wait longer)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from datetime import datetime, timezone

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from postbox import outbox
from postbox.codec import AvroCodec, EventHeaders
from postbox.outbox import Outbox
from postbox.outbox.retention import LOCK_KEY
from postbox.schemas import SchemaRepository
from tests.integration.incident_support import CLI, ROOT
from tests.support.consumers import wait_for
from tests.support.kafka import read_until

# disruptive (runs alone, after the tests that share the stack): runs retention on the stack's outbox and holds its retention lock.
pytestmark = [pytest.mark.integration, pytest.mark.disruptive]
NOW = datetime(2026, 5, 6, 7, 8, 9, tzinfo=timezone.utc)


def placed(order_id: str) -> dict:
    return {"order_id": order_id, "customer_id": "c", "total_cents": 5, "placed_at": NOW,
            "items": [{"sku": "s", "quantity": 1, "unit_price_cents": 5}]}


def in_thread(work):
    """Run ``work()`` in a new thread (a fresh per-thread connection of ``outbox.transaction()``)."""
    out: dict = {}

    def target() -> None:
        try:
            out["value"] = work()
        except BaseException as exc:  # re-raised in the caller
            out["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(60)
    if "error" in out:
        raise out["error"]
    return out["value"]


def test_transaction_without_a_connection_uses_postbox_database_url(settings, admin_conn, monkeypatch, unique):
    """docs/writer.md, Emit: "Code without a transaction of its own uses the unit of work
    (connection from `POSTBOX_DATABASE_URL`, or pass one)"; src/postbox/outbox/__init__.py: "on a
    per-thread connection". The block commits the business statement and the event together, rolls
    both back when it raises, and reuses its thread's connection."""
    name = f"test-uow-{unique}"
    separator = "&" if "?" in settings.database_url else "?"
    monkeypatch.setenv("POSTBOX_DATABASE_URL", f"{settings.database_url}{separator}application_name={name}")

    def unit_of_work(fail: bool = False):
        with outbox.transaction() as tx:
            who = tx.execute("SELECT current_user, current_setting('application_name'), pg_backend_pid()").fetchone()
            event = tx.emit("order", f"uow-{unique}", "OrderPlaced", placed(f"uow-{unique}"))
            if fail:
                raise RuntimeError("the business step failed")
        return who, event

    def twice():
        first = unit_of_work()
        with pytest.raises(RuntimeError):
            unit_of_work(fail=True)
        second = unit_of_work()
        return first, second

    (who1, kept1), (who2, kept2) = in_thread(twice)
    (who3, _kept3) = in_thread(unit_of_work)
    assert who1[:2] == ("postbox_app", name), "the connection comes from POSTBOX_DATABASE_URL"
    assert who2[2] == who1[2], "the same thread reuses its connection"
    assert who3[2] != who1[2], "another thread has its own"
    rows = admin_conn.execute("SELECT id FROM postbox.outbox WHERE aggregate_id = %s", (f"uow-{unique}",)).fetchall()
    assert {r[0] for r in rows} >= {kept1.id, kept2.id} and len(rows) == 3, "the failed block's event was rolled back"


@pytest.fixture
def repo(unique, tmp_path) -> SchemaRepository:
    shutil.copytree(ROOT / "schemas" / "order", tmp_path / f"otel{unique}")
    return SchemaRepository.load(tmp_path)


def test_traceparent_comes_from_the_current_opentelemetry_span(settings, pg_conn, repo, unique):
    """docs/writer.md, Emit: "with OpenTelemetry installed the current span is picked up
    automatically. It travels in the `traceparent` header"; src/postbox/outbox/trace.py: an explicit
    `traceparent=` or `trace_context(...)` comes first. Real OpenTelemetry SDK spans; the expected
    value is what OpenTelemetry's own W3C propagator writes for the span."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    agg = f"otel{unique}"
    writer = Outbox(codec=AvroCodec(repo))
    tracer = TracerProvider().get_tracer("postbox-tests")
    with tracer.start_as_current_span("place order"):
        carrier: dict[str, str] = {}
        TraceContextTextMapPropagator().inject(carrier)  # what OpenTelemetry itself would send
        expected = carrier["traceparent"]
        with writer.transaction(pg_conn) as tx:
            in_span = tx.emit(agg, "a1", "OrderPlaced", placed("a1"))
        explicit = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        with outbox.trace_context(explicit), writer.transaction(pg_conn) as tx:
            overridden = tx.emit(agg, "a2", "OrderPlaced", placed("a2"))
    with writer.transaction(pg_conn) as tx:
        outside = tx.emit(agg, "a3", "OrderPlaced", placed("a3"))

    assert in_span.traceparent == expected
    assert overridden.traceparent == explicit
    assert outside.traceparent is None
    records = read_until(settings.kafka_bootstrap, in_span.topic, lambda rs: len(rs) >= 3)
    headers = {r.event_id: EventHeaders.parse(list(r.headers.items())) for r in records}
    assert headers[str(in_span.id)].traceparent == expected
    assert headers[str(overridden.id)].traceparent == explicit
    assert not headers[str(outside.id)].traceparent


def _maint_url(admin_database_url: str) -> str:
    """The maintenance role through the stack's socket (its password belongs to the stack)."""
    return make_conninfo(admin_database_url, user="postbox_maint")


def _retention(admin_database_url: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([*CLI, "db", "retention", "--url", _maint_url(admin_database_url), "--json", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)


def _waiting_for_a_lock(admin_conn, user: str) -> bool:
    row = admin_conn.execute(
        "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid WHERE NOT l.granted AND a.usename = %s",
        (user,)).fetchone()
    return row[0] > 0


def _emit_behind_retention(database_url: str, admin_conn, aggregate_type: str) -> tuple[bool, bool]:
    """Emit (raw INSERT as the app role) while retention waits for its lock: (committed, was seen
    waiting for a lock). Without retention's lock_timeout it would wait for the holder, which
    commits only after this returns: its statement_timeout (20 s) would fail it."""
    done = threading.Event()

    def emit() -> None:
        with psycopg.connect(database_url) as conn:
            conn.execute("SET statement_timeout = '20s'")
            with conn.transaction():
                conn.execute("INSERT INTO postbox.outbox (id, aggregate_type, aggregate_id, event_type, payload) VALUES (%s, %s, 'b', 'E', '\\x00')",
                             (str(outbox.uuid7()), aggregate_type))
        done.set()

    emitter = threading.Thread(target=emit)
    emitter.start()
    queued = False
    deadline = time.monotonic() + 30
    while not done.is_set() and time.monotonic() < deadline:
        queued = queued or _waiting_for_a_lock(admin_conn, "postbox_app")
        time.sleep(0.02)
    emitter.join(30)
    return done.is_set(), queued


def test_retention_runs_one_at_a_time(admin_database_url, admin_conn):
    """docs/writer.md, Retention: "One run at a time (advisory lock)"; src/postbox/outbox/retention.py:
    "a second run reports and exits 0". A session holding the run's advisory lock: the run changes
    nothing and says so."""
    admin_conn.execute("SELECT pg_advisory_lock(hashtext(%s))", (LOCK_KEY,))
    try:
        run = _retention(admin_database_url, "--keep", "2d")
        out, err = run.communicate(timeout=120)
    finally:
        admin_conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (LOCK_KEY,))
    assert run.returncode == 0, err
    report = json.loads(out)
    assert report["locked_out"] is True and report["dropped"] == [] and report["created"] == []


def test_retention_lock_timeout_lets_emits_through_and_retries(settings, admin_database_url, admin_conn, unique):
    """docs/writer.md, Retention: "every lock on the outbox is bounded by `--lock-timeout` (2 s) and
    retried, so an emit never waits longer". An application transaction holds an uncommitted emit
    while retention must drop an expired partition (ACCESS EXCLUSIVE on the outbox): retention
    waits; a second emit queued behind retention's lock request gets through once retention's
    attempt times out (it would otherwise wait for the first transaction: its statement_timeout
    of 20 s would fail it); when the first transaction commits, retention's retry drops the
    partition and exits 0."""
    admin_conn.execute("SET ROLE postbox_owner")  # partitions belong to the outbox's owner, as `db init` makes them
    admin_conn.execute("SELECT postbox.outbox_ensure_partitions(interval '1 day', interval '1 day', now() - interval '5 days')")
    admin_conn.execute("RESET ROLE")
    expired = admin_conn.execute("SELECT count(*) FROM postbox.outbox_partitions WHERE NOT is_default AND upper_time <= now() - interval '2 days'").fetchone()
    assert expired[0] > 0, "an expired partition for retention to drop"

    holder = psycopg.connect(settings.database_url)
    holder.execute("INSERT INTO postbox.outbox (id, aggregate_type, aggregate_id, event_type, payload) VALUES (%s, %s, 'a', 'E', '\\x00')",
                   (str(outbox.uuid7()), f"lock{unique}"))  # uncommitted: ROW EXCLUSIVE on postbox.outbox
    run = _retention(admin_database_url, "--keep", "2d", "--lock-timeout", "2s")
    try:
        queued = False
        for _attempt in range(3):  # each round uses one of retention's lock attempts
            wait_for(lambda: _waiting_for_a_lock(admin_conn, "postbox_maint"), 60, "retention waiting for the outbox lock")
            done, queued = _emit_behind_retention(settings.database_url, admin_conn, f"lock{unique}")
            assert done, "the second emit did not get through while retention was retrying"
            if queued:
                break
        assert queued, "the second emit never queued behind retention's lock request (the scenario did not happen)"
        assert run.poll() is None, "retention should still be retrying: the first transaction holds the outbox"
        holder.commit()
        out, err = run.communicate(timeout=120)
    finally:
        holder.close()
        if run.poll() is None:
            run.kill()
    assert run.returncode == 0, err
    report = json.loads(out)
    assert any("dropped partition" in line for line in report["dropped"]), report
    admin_conn.execute("DELETE FROM postbox.outbox WHERE aggregate_type = %s", (f"lock{unique}",))


def test_retention_defaults_to_the_local_stacks_maintenance_role():
    """`postbox db retention --help`: "postbox_maint URL (env POSTBOX_MAINT_DATABASE_URL; default:
    local stack)"; docs/writer.md: `postbox db retention` runs from cron as `postbox_maint`. Without
    --url or the variable, the command reaches the local stack (its port, its generated password)."""
    env = {k: v for k, v in os.environ.items() if k not in ("POSTBOX_MAINT_DATABASE_URL", "POSTBOX_ADMIN_DATABASE_URL")}
    for command in (["db", "retention", "--dry-run", "--json"], ["db", "status", "--json"]):
        done = subprocess.run([*CLI, *command], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout), done.stdout
