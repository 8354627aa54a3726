"""`postbox demo` on the real stack: a small run passes; its invariant check catches an event
applied twice by hand; without a terminal the view is plain lines."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from datetime import timedelta

import psycopg
import pytest
import redis

from postbox.settings import Settings

# disruptive (runs alone, after the tests that share the stack): `postbox demo` resets the shop's tables, keys and groups and counts what the shared order/payment topics carry.
pytestmark = [pytest.mark.integration, pytest.mark.disruptive]


@pytest.fixture(scope="module")
def small_run():
    from postbox.demo.runner import DemoConfig, run_demo

    out = io.StringIO()                               # not a terminal: plain lines
    result = run_demo(DemoConfig(orders=100, seed=7, drain_timeout=120), out)
    return result, out.getvalue()


def test_small_demo_passes(small_run) -> None:
    result, text = small_run
    assert result.passed, text
    assert all(c.ok for c in result.checks)
    assert result.scope.facts["orders"] == 100
    assert result.scope.facts["payment_failed"] > 0     # some orders were compensated
    assert "verdict: PASS" in text


def test_a_finished_run_leaves_no_group_in_the_registry(small_run, admin_redis_url) -> None:
    """The demo's groups are single-use with a 1-day marker TTL: left registered, they would make
    `postbox doctor` fail its marker-TTL check on a stack that just ran `./dev.sh demo`."""
    from postbox.effects import groups

    result, _ = small_run
    client = redis.Redis.from_url(admin_redis_url)
    try:
        registered = groups.read(client)
    finally:
        client.close()
    assert not set(result.scope.groups.values()) & set(registered), registered


def test_not_a_tty_gives_plain_lines(small_run) -> None:
    _, text = small_run
    assert "\x1b[" not in text                          # no cursor movement, no colour
    progress = [line for line in text.splitlines() if re.match(r"\[\s*\d+\.\d+s\] ", line)]
    assert progress and "placed" in progress[-1] and "inventory" in progress[-1]


def test_event_applied_twice_by_hand_fails_the_verdict(small_run, admin_database_url: str) -> None:
    """Bypass the dedupe (another group's marker) and apply one OrderPlaced's inventory effects a
    second time: the per-event application counter sees it, and the verdict fails."""
    from consumers.shop import inventory
    from consumers.shop.keys import StockKeys
    from postbox.demo.invariants import check_invariants, load_orders
    from postbox.effects import EffectsEngine
    from postbox.testing import effects_of, make_event

    result, _ = small_run
    client = redis.Redis.from_url(Settings.load().redis_url)
    with psycopg.connect(admin_database_url, autocommit=True) as conn:
        orders = load_orders(conn, result.scope.order_prefix)
        order_id = next(oid for oid, o in sorted(orders.items()) if o["ready"])
        row = conn.execute("SELECT customer_id, total_cents FROM shop.orders WHERE id = %s", (order_id,)).fetchone()
        # The OrderPlaced event id the inventory group applied for this order.
        applied = {k.decode(): v for k, v in client.hgetall(StockKeys().applied).items()}
        event_id = conn.execute(
            "SELECT id::text FROM postbox.outbox WHERE aggregate_type = 'order' AND aggregate_id = %s"
            " AND event_type = 'OrderPlaced'", (order_id,)).fetchone()[0]
        assert applied[event_id] == b"1"
        event = make_event("OrderPlaced", {"order_id": order_id, "customer_id": row[0], "total_cents": row[1],
                                           "items": orders[order_id]["items"], "placed_at": 0},
                           aggregate_type="order", aggregate_id=order_id, id=event_id)
        fx = effects_of(inventory.app, event)  # the app builds reserve's typed payload
        engine = EffectsEngine(client, group="test-bypass-dedupe", marker_ttl=timedelta(minutes=5))
        assert engine.apply_one(inventory.app.event_ref(event), fx).applied   # a group that never saw it: no marker, applies
        checks = check_invariants(client, conn, result.scope)
    client.close()
    broken = [c for c in checks if not c.ok]
    assert [c.name for c in broken] == ["no event applied twice (and none missed)"]
    assert f"event {event_id} applied 2x" in broken[0].detail


def test_cli_exit_code_and_json(tmp_path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", "from postbox.cli import main; main()", "demo", "--orders", "30", "--json", "--seed", "3"],
        capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    assert data["passed"] is True and len(data["checks"]) >= 7
    assert "verdict: PASS" in proc.stderr
