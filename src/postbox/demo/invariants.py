"""The saga's business invariants, checked against PostgreSQL (the services' truth) and Redis
(the consumers' projections) once the pipeline has drained.

Each check returns a :class:`Check` (name, ok, detail with the first offending examples), so a
broken invariant says which orders and why. The checks read only; they never repair anything.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import psycopg
import redis

from consumers.shop.keys import PaymentKeys, ShippingKeys, StockKeys, shard_keys

EXAMPLES = 3


@dataclass
class Check:
    name: str
    ok: bool
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "detail": self.detail}


@dataclass
class Scope:
    """What one demo run covers: its orders (by id prefix) and its consumer groups."""

    order_prefix: str                     # e.g. "o-3f9a2c-"
    groups: dict[str, str]                # inventory|payment|shipping -> Kafka consumer group
    facts: dict[str, Any] = field(default_factory=dict)


def _examples(items: list[str]) -> str:
    shown = ", ".join(items[:EXAMPLES])
    return shown + (f" (+{len(items) - EXAMPLES} more)" if len(items) > EXAMPLES else "")


def load_orders(conn: psycopg.Connection[Any], prefix: str) -> dict[str, dict[str, Any]]:
    rows = conn.execute(
        "SELECT o.id, o.status, o.items, p.outcome, p.refunded_at IS NOT NULL, p.amount_cents"
        " FROM shop.orders o LEFT JOIN payments.payments p ON p.order_id = o.id WHERE o.id LIKE %s",
        (prefix + "%",),
    ).fetchall()
    out = {}
    for oid, status, items, outcome, refunded, amount in rows:
        ready = status == "placed" and outcome == "captured" and not refunded
        out[oid] = {"status": status, "items": items, "outcome": outcome, "refunded": refunded,
                    "amount": amount, "ready": ready}
    return out


def expected_events(orders: dict[str, dict[str, Any]]) -> dict[str, int]:
    """How many events each group must have applied, from the services' own tables."""
    placed = len(orders)
    cancelled = sum(o["status"] == "cancelled" for o in orders.values())
    captured = sum(o["outcome"] == "captured" for o in orders.values())
    failed = sum(o["outcome"] == "failed" for o in orders.values())
    refunded = sum(bool(o["refunded"]) for o in orders.values())
    return {
        "inventory": placed + cancelled + failed,
        "payment": placed + cancelled,
        "shipping": placed + cancelled + captured + failed + refunded,
    }


def applied_counters(client: redis.Redis) -> dict[str, dict[str, int]]:
    """Per group: event id -> times its effects were applied (written by the effects themselves)."""
    out: dict[str, dict[str, int]] = {}
    sources = {
        "inventory": [StockKeys().applied],
        "payment": [k["applied"] for k in shard_keys("pay")],
        "shipping": [k["applied"] for k in shard_keys("ship")],
    }
    for group, keys in sources.items():
        counts: dict[str, int] = {}
        for key in keys:
            for f, v in client.hgetall(key).items():
                counts[f.decode()] = int(v)
        out[group] = counts
    return out


def applied_totals(client: redis.Redis) -> dict[str, int]:
    """Distinct events applied per group (HLEN of the counters): cheap, for progress."""
    with client.pipeline(transaction=False) as pipe:
        pipe.hlen(StockKeys().applied)
        for k in shard_keys("pay"):
            pipe.hlen(k["applied"])
        for k in shard_keys("ship"):
            pipe.hlen(k["applied"])
        r = pipe.execute()
    n = len(shard_keys("pay"))
    return {"inventory": r[0], "payment": sum(r[1 : 1 + n]), "shipping": sum(r[1 + n :])}


def check_invariants(client: redis.Redis, conn: psycopg.Connection[Any], scope: Scope) -> list[Check]:
    orders = load_orders(conn, scope.order_prefix)
    ids = sorted(orders)
    checks: list[Check] = []
    stock = StockKeys()

    # 1. The saga finished: every order has a payment decision.
    undecided = [oid for oid in ids if orders[oid]["outcome"] is None]
    checks.append(Check("every order has a payment decision", not undecided and bool(ids),
                        f"{len(ids)} orders, all decided" if not undecided and ids
                        else ("no orders" if not ids else f"{len(undecided)} undecided: {_examples(undecided)}")))

    # 2. Every order is ready to ship (placed + captured) or compensated, and Redis agrees.
    with client.pipeline(transaction=False) as pipe:
        for oid in ids:
            pipe.sismember(ShippingKeys(oid).ready, oid)
            pipe.hget(stock.reservation(oid), "_status")
            pipe.hget(PaymentKeys(oid).status, oid)
        replies = pipe.execute()
    wrong_ship, wrong_stock, wrong_pay = [], [], []
    for i, oid in enumerate(ids):
        o = orders[oid]
        in_ready, reservation, pay_status = bool(replies[3 * i]), replies[3 * i + 1], replies[3 * i + 2]
        if in_ready != o["ready"]:
            wrong_ship.append(f"{oid} ({'ready' if in_ready else 'not ready'} in Redis, {'ready' if o['ready'] else 'compensated'} in PostgreSQL)")
        want = b"reserved" if o["ready"] else b"released"
        if reservation != want:
            wrong_stock.append(f"{oid} (reservation {reservation.decode() if reservation else 'missing'}, expected {want.decode()})")
        want_pay = "refunded" if o["refunded"] else o["outcome"]
        if (pay_status.decode() if pay_status else None) != want_pay:
            wrong_pay.append(f"{oid} (Redis {pay_status.decode() if pay_status else 'missing'}, PostgreSQL {want_pay})")
    ready = sum(o["ready"] for o in orders.values())
    checks.append(Check("every order ready to ship or compensated", not wrong_ship,
                        f"{ready} ready to ship, {len(ids) - ready} compensated" if not wrong_ship
                        else f"{len(wrong_ship)} wrong: {_examples(wrong_ship)}"))
    unrefunded = [oid for oid in ids if orders[oid]["status"] == "cancelled" and orders[oid]["outcome"] == "captured" and not orders[oid]["refunded"]]
    comp_problems = wrong_stock + [f"{oid} (cancelled but its capture was not refunded)" for oid in unrefunded]
    checks.append(Check("compensations complete (stock released, captures refunded)", not comp_problems,
                        "every cancelled or failed order released its stock; every cancelled capture was refunded"
                        if not comp_problems else f"{len(comp_problems)} wrong: {_examples(comp_problems)}"))

    # 3. Stock: reserved == sum of open orders' quantities; nothing lost, nothing negative.
    reserved = {f.decode(): int(v) for f, v in client.hgetall(stock.reserved).items()}
    available = {f.decode(): int(v) for f, v in client.hgetall(stock.available).items()}
    seeded = {f.decode(): int(v) for f, v in client.hgetall(stock.seeded).items()}
    open_units: Counter[str] = Counter()
    for o in orders.values():
        if o["ready"]:
            for line in o["items"]:
                open_units[line["sku"]] += int(line["quantity"])
    skus = sorted(set(reserved) | set(open_units) | set(seeded))
    bad = [f"{sku}: reserved {reserved.get(sku, 0)} vs open orders {open_units.get(sku, 0)}"
           for sku in skus if reserved.get(sku, 0) != open_units.get(sku, 0)]
    bad += [f"{sku}: available {available.get(sku, 0)} + reserved {reserved.get(sku, 0)} != stocked {seeded.get(sku, 0)}"
            for sku in skus if available.get(sku, 0) + reserved.get(sku, 0) != seeded.get(sku, 0)]
    bad += [f"{sku}: negative" for sku in skus if available.get(sku, 0) < 0 or reserved.get(sku, 0) < 0]
    checks.append(Check("stock reserved == open orders' quantities", not bad,
                        f"{sum(open_units.values())} units reserved for {ready} open orders over {len(skus)} SKUs; none lost, none negative"
                        if not bad else f"{len(bad)} wrong: {_examples(bad)}"))

    # 4. The payment projection matches the payment service's table.
    checks.append(Check("payment projection == payments table", not wrong_pay,
                        "status of every order matches" if not wrong_pay else f"{len(wrong_pay)} wrong: {_examples(wrong_pay)}"))

    # 5. No event applied twice (per-event counters written by the effects), none missing.
    counters = applied_counters(client)
    expected = expected_events(orders)
    twice = [f"{g}: event {eid} applied {n}x" for g, c in counters.items() for eid, n in c.items() if n != 1]
    missing = [f"{g}: {len(counters[g])} applied, {expected[g]} expected" for g in expected if len(counters[g]) != expected[g]]
    checks.append(Check("no event applied twice (and none missed)", not twice and not missing,
                        ", ".join(f"{g} {len(c)}" for g, c in counters.items()) + " events, each applied once"
                        if not twice and not missing else _examples(twice + missing)))

    # 6. No double charge or double emit: one outcome event per payment, one refund per refund.
    rows = conn.execute(
        "SELECT event_type, count(*), count(DISTINCT aggregate_id) FROM postbox.outbox"
        " WHERE aggregate_type = 'payment' AND aggregate_id LIKE %s GROUP BY event_type",
        ("pay-" + scope.order_prefix + "%",),
    ).fetchall()
    emitted = {et: (n, distinct) for et, n, distinct in rows}
    want = {
        "PaymentCaptured": sum(o["outcome"] == "captured" for o in orders.values()),
        "PaymentFailed": sum(o["outcome"] == "failed" for o in orders.values()),
        "PaymentRefunded": sum(bool(o["refunded"]) for o in orders.values()),
    }
    diffs = [f"{et}: {emitted.get(et, (0, 0))[0]} emitted, {n} expected" for et, n in want.items() if emitted.get(et, (0, 0)) != (n, n)]
    checks.append(Check("one payment event per decision (no double charge or emit)", not diffs,
                        ", ".join(f"{n} {et}" for et, n in want.items()) if not diffs else "; ".join(diffs)))

    # 7. Nothing dead-lettered.
    dead = {}
    for name, group in scope.groups.items():
        n = 0
        for key in client.scan_iter(match=f"postbox:*failures:{group}", count=1000):
            n += client.xlen(key)
        dead[name] = n
    checks.append(Check("no dead letters", not any(dead.values()),
                        "failure streams empty" if not any(dead.values()) else ", ".join(f"{g}: {n}" for g, n in dead.items() if n)))
    scope.facts.update(orders=len(ids), ready=ready, expected_events=expected,
                       cancelled=sum(o["status"] == "cancelled" for o in orders.values()),
                       payment_failed=sum(o["outcome"] == "failed" for o in orders.values()),
                       refunded=want["PaymentRefunded"], dead_letters=dead)
    return checks
