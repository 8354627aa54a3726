"""Inventory handlers and the reserve/release Lua functions, on the real Redis through the harness."""

from __future__ import annotations


import pytest

from consumers.shop import inventory
from consumers.shop.keys import StockKeys
from postbox.effects import key_slot
from postbox.errors import PermanentEffectError
from postbox.testing import EffectsHarness, make_event
from tests.integration.shop_support import harness  # noqa: F401 - the shared fixture


pytestmark = pytest.mark.integration  # the harness applies to the stack's Redis




def placed(order_id: str, *lines: tuple[str, int]):
    items = [{"sku": sku, "quantity": q, "unit_price_cents": 100} for sku, q in lines]
    return make_event("OrderPlaced", {"order_id": order_id, "customer_id": "c1", "items": items,
                                      "total_cents": 100 * sum(q for _, q in lines), "placed_at": 0},
                      aggregate_type="order", aggregate_id=order_id)


def payment_failed(order_id: str):
    return make_event("PaymentFailed", {"payment_id": "pay-" + order_id, "order_id": order_id, "amount_cents": 1,
                                        "reason": "card declined", "retryable": False, "failed_at": 0},
                      aggregate_type="payment", aggregate_id="pay-" + order_id)


def cancelled(order_id: str):
    return make_event("OrderCancelled", {"order_id": order_id, "reason": "customer", "cancelled_at": 0},
                      aggregate_type="order", aggregate_id=order_id)


def seed(h: EffectsHarness, **units: int) -> StockKeys:
    k = StockKeys()
    h.redis.hset(k.available, mapping=units)
    h.touched.update({k.available.encode(), k.reserved.encode()})
    return k


def stock(h: EffectsHarness, key: str) -> dict[str, int]:
    return {f.decode(): int(v) for f, v in h.redis.hgetall(key).items()}


def test_reserve_moves_units_once(harness: EffectsHarness) -> None:
    k = seed(harness, A=10, B=5)
    event = placed("o1", ("A", 2), ("B", 1), ("A", 1))     # repeated SKU lines add up
    assert harness.deliver(inventory.app, event).applied
    assert harness.deliver(inventory.app, event).duplicate  # redelivery: nothing changes
    assert stock(harness, k.available) == {"A": 7, "B": 4}
    assert stock(harness, k.reserved) == {"A": 3, "B": 1}
    assert harness.redis.hget(k.reservation("o1"), "_status") == b"reserved"
    assert harness.redis.hget(k.applied, event.id) == b"1"


def test_short_stock_refuses_the_whole_order_without_partial_effect(harness: EffectsHarness) -> None:
    k = seed(harness, A=10, B=1)
    before = {key: harness.redis.dump(key) for key in (k.available, k.reserved)}
    event = placed("o2", ("A", 4), ("B", 2))                # A is there, B is short
    result = harness.deliver(inventory.app, event, check=False)
    assert result.failed
    assert "OUT_OF_STOCK" in (result.error or "") and "B has 1, needs 2" in (result.error or "")
    assert {key: harness.redis.dump(key) for key in (k.available, k.reserved)} == before
    assert not harness.redis.exists(k.reservation("o2"))
    assert harness.redis.hget(k.applied, event.id) is None  # the counter was undone with the rest
    with pytest.raises(PermanentEffectError):
        harness.deliver(inventory.app, event)               # still refused; stock never negative
    assert stock(harness, k.available) == {"A": 10, "B": 1}


def test_release_on_payment_failed_and_cancel_is_idempotent(harness: EffectsHarness) -> None:
    k = seed(harness, A=10)
    harness.deliver(inventory.app, placed("o3", ("A", 4)))
    harness.deliver(inventory.app, payment_failed("o3"))
    assert stock(harness, k.available) == {"A": 10} and stock(harness, k.reserved) == {"A": 0}
    harness.deliver(inventory.app, cancelled("o3"))         # second compensation: no double release
    assert stock(harness, k.available) == {"A": 10} and stock(harness, k.reserved) == {"A": 0}
    assert harness.redis.hget(k.reservation("o3"), "_status") == b"released"


def test_release_before_reserve_leaves_a_tombstone(harness: EffectsHarness) -> None:
    k = seed(harness, A=10)
    harness.deliver(inventory.app, payment_failed("o4"))    # payment topic consumed first
    harness.deliver(inventory.app, placed("o4", ("A", 4)))  # the late reservation is skipped
    assert stock(harness, k.available) == {"A": 10}
    assert harness.redis.hget(k.reservation("o4"), "_status") == b"released"


def test_every_key_of_an_event_shares_one_slot(harness: EffectsHarness) -> None:
    event = placed("o5", ("A", 1))
    fx = harness.effects_of(inventory.app, event)
    slot = harness.engine.check_slots(inventory.app.event_ref(event), fx)  # raises if a key lies outside
    assert slot == key_slot(StockKeys().available)           # the routing key's slot: cluster-ready
