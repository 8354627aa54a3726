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


Orders = dict[str, dict[str, Any]]


@dataclass
class _Mismatches:
    """Per order, where Redis's projections disagree with PostgreSQL: read in one pipeline, judged by three checks."""

    ship: list[str]
    stock: list[str]
    pay: list[str]


def _decided(orders: Orders, ids: list[str]) -> Check:
    """The saga finished: every order has a payment decision."""
    undecided = [oid for oid in ids if orders[oid]["outcome"] is None]
    return Check("every order has a payment decision", not undecided and bool(ids),
                 f"{len(ids)} orders, all decided" if not undecided and ids
                 else ("no orders" if not ids else f"{len(undecided)} undecided: {_examples(undecided)}"))


def _mismatch(oid: str, order: dict[str, Any], in_ready: bool, reservation: bytes | None, pay_status: bytes | None, found: _Mismatches) -> None:
    """Adds where one order's shipping, reservation and payment projections disagree with its rows."""
    if in_ready != order["ready"]:
        found.ship.append(f"{oid} ({'ready' if in_ready else 'not ready'} in Redis, {'ready' if order['ready'] else 'compensated'} in PostgreSQL)")
    want = b"reserved" if order["ready"] else b"released"
    if reservation != want:
        found.stock.append(f"{oid} (reservation {reservation.decode() if reservation else 'missing'}, expected {want.decode()})")
    want_pay = "refunded" if order["refunded"] else order["outcome"]
    if (pay_status.decode() if pay_status else None) != want_pay:
        found.pay.append(f"{oid} (Redis {pay_status.decode() if pay_status else 'missing'}, PostgreSQL {want_pay})")


def _mismatches(client: redis.Redis, orders: Orders, ids: list[str], stock: StockKeys) -> _Mismatches:
    """Reads every order's projections in one pipeline and compares them with PostgreSQL."""
    with client.pipeline(transaction=False) as pipe:
        for oid in ids:
            pipe.sismember(ShippingKeys(oid).ready, oid)
            pipe.hget(stock.reservation(oid), "_status")
            pipe.hget(PaymentKeys(oid).status, oid)
        replies = pipe.execute()
    found = _Mismatches([], [], [])
    for i, oid in enumerate(ids):
        _mismatch(oid, orders[oid], bool(replies[3 * i]), replies[3 * i + 1], replies[3 * i + 2], found)
    return found


def _ready_or_compensated(wrong_ship: list[str], ids: list[str], ready: int) -> Check:
    """Every order is ready to ship (placed + captured) or compensated, and Redis agrees."""
    return Check("every order ready to ship or compensated", not wrong_ship,
                 f"{ready} ready to ship, {len(ids) - ready} compensated" if not wrong_ship
                 else f"{len(wrong_ship)} wrong: {_examples(wrong_ship)}")


def _compensated(orders: Orders, ids: list[str], wrong_stock: list[str]) -> Check:
    """Compensations completed: stock released, cancelled captures refunded."""
    unrefunded = [oid for oid in ids if orders[oid]["status"] == "cancelled" and orders[oid]["outcome"] == "captured" and not orders[oid]["refunded"]]
    comp_problems = wrong_stock + [f"{oid} (cancelled but its capture was not refunded)" for oid in unrefunded]
    return Check("compensations complete (stock released, captures refunded)", not comp_problems,
                 "every cancelled or failed order released its stock; every cancelled capture was refunded"
                 if not comp_problems else f"{len(comp_problems)} wrong: {_examples(comp_problems)}")


def _counts(client: redis.Redis, key: str) -> dict[str, int]:
    """A hash of per-SKU unit counts."""
    return {f.decode(): int(v) for f, v in client.hgetall(key).items()}


def _open_units(orders: Orders) -> Counter[str]:
    """Units per SKU that the orders ready to ship hold reserved."""
    open_units: Counter[str] = Counter()
    for o in orders.values():
        if o["ready"]:
            for line in o["items"]:
                open_units[line["sku"]] += int(line["quantity"])
    return open_units


def _stock_balanced(client: redis.Redis, orders: Orders, stock: StockKeys, ready: int) -> Check:
    """Stock: reserved == sum of open orders' quantities; nothing lost, nothing negative."""
    reserved, available, seeded = (_counts(client, key) for key in (stock.reserved, stock.available, stock.seeded))
    open_units = _open_units(orders)
    skus = sorted(set(reserved) | set(open_units) | set(seeded))
    bad = [f"{sku}: reserved {reserved.get(sku, 0)} vs open orders {open_units.get(sku, 0)}"
           for sku in skus if reserved.get(sku, 0) != open_units.get(sku, 0)]
    bad += [f"{sku}: available {available.get(sku, 0)} + reserved {reserved.get(sku, 0)} != stocked {seeded.get(sku, 0)}"
            for sku in skus if available.get(sku, 0) + reserved.get(sku, 0) != seeded.get(sku, 0)]
    bad += [f"{sku}: negative" for sku in skus if available.get(sku, 0) < 0 or reserved.get(sku, 0) < 0]
    return Check("stock reserved == open orders' quantities", not bad,
                 f"{sum(open_units.values())} units reserved for {ready} open orders over {len(skus)} SKUs; none lost, none negative"
                 if not bad else f"{len(bad)} wrong: {_examples(bad)}")


def _payments_projected(wrong_pay: list[str]) -> Check:
    """The payment projection matches the payment service's table."""
    return Check("payment projection == payments table", not wrong_pay,
                 "status of every order matches" if not wrong_pay else f"{len(wrong_pay)} wrong: {_examples(wrong_pay)}")


def _applied_once(client: redis.Redis, expected: dict[str, int]) -> Check:
    """No event applied twice (per-event counters written by the effects), none missing."""
    counters = applied_counters(client)
    twice = [f"{g}: event {eid} applied {n}x" for g, c in counters.items() for eid, n in c.items() if n != 1]
    missing = [f"{g}: {len(counters[g])} applied, {expected[g]} expected" for g in expected if len(counters[g]) != expected[g]]
    return Check("no event applied twice (and none missed)", not twice and not missing,
                 ", ".join(f"{g} {len(c)}" for g, c in counters.items()) + " events, each applied once"
                 if not twice and not missing else _examples(twice + missing))


def _payment_events(orders: Orders) -> dict[str, int]:
    """How many of each payment event the services' tables call for."""
    return {
        "PaymentCaptured": sum(o["outcome"] == "captured" for o in orders.values()),
        "PaymentFailed": sum(o["outcome"] == "failed" for o in orders.values()),
        "PaymentRefunded": sum(bool(o["refunded"]) for o in orders.values()),
    }


def _one_event_per_decision(conn: psycopg.Connection[Any], scope: Scope, want: dict[str, int]) -> Check:
    """No double charge or double emit: one outcome event per payment, one refund per refund."""
    rows = conn.execute(
        "SELECT event_type, count(*), count(DISTINCT aggregate_id) FROM postbox.outbox"
        " WHERE aggregate_type = 'payment' AND aggregate_id LIKE %s GROUP BY event_type",
        ("pay-" + scope.order_prefix + "%",),
    ).fetchall()
    emitted = {et: (n, distinct) for et, n, distinct in rows}
    diffs = [f"{et}: {emitted.get(et, (0, 0))[0]} emitted, {n} expected" for et, n in want.items() if emitted.get(et, (0, 0)) != (n, n)]
    return Check("one payment event per decision (no double charge or emit)", not diffs,
                 ", ".join(f"{n} {et}" for et, n in want.items()) if not diffs else "; ".join(diffs))


def _dead_letters(client: redis.Redis, scope: Scope) -> dict[str, int]:
    """Entries in each group's failure streams."""
    dead = {}
    for name, group in scope.groups.items():
        n = 0
        for key in client.scan_iter(match=f"postbox:*failures:{group}", count=1000):
            n += client.xlen(key)
        dead[name] = n
    return dead


def _no_dead_letters(dead: dict[str, int]) -> Check:
    """Nothing dead-lettered."""
    return Check("no dead letters", not any(dead.values()),
                 "failure streams empty" if not any(dead.values()) else ", ".join(f"{g}: {n}" for g, n in dead.items() if n))


def check_invariants(client: redis.Redis, conn: psycopg.Connection[Any], scope: Scope) -> list[Check]:
    """Every invariant, one check each, in a fixed order; the run's figures go to ``scope.facts``."""
    orders = load_orders(conn, scope.order_prefix)
    ids = sorted(orders)
    stock = StockKeys()
    ready = sum(o["ready"] for o in orders.values())
    decided = _decided(orders, ids)
    wrong = _mismatches(client, orders, ids, stock)
    checks = [decided, _ready_or_compensated(wrong.ship, ids, ready), _compensated(orders, ids, wrong.stock),
              _stock_balanced(client, orders, stock, ready), _payments_projected(wrong.pay)]
    expected = expected_events(orders)
    checks.append(_applied_once(client, expected))
    want = _payment_events(orders)
    checks.append(_one_event_per_decision(conn, scope, want))
    dead = _dead_letters(client, scope)
    checks.append(_no_dead_letters(dead))
    scope.facts.update(orders=len(ids), ready=ready, expected_events=expected,
                       cancelled=sum(o["status"] == "cancelled" for o in orders.values()),
                       payment_failed=sum(o["outcome"] == "failed" for o in orders.values()),
                       refunded=want["PaymentRefunded"], dead_letters=dead)
    return checks
