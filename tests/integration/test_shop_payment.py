"""Payment projection on the stack's Redis, exactly once per event (the provider's decisions: tests/unit/test_shop_payment_service.py)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from consumers.shop import payment
from consumers.shop.keys import PaymentKeys
from consumers.shop.payloads import OrderCancelled, OrderPlaced
from consumers.shop.payment_service import Outcome
from postbox.testing import EffectsHarness, make_event
from tests.integration.shop_support import harness  # noqa: F401 - the shared fixture


pytestmark = pytest.mark.integration  # the harness applies to the stack's Redis

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)




def test_charge_projection_applies_once_even_when_the_database_work_was_replayed(harness: EffectsHarness) -> None:
    placed = OrderPlaced(order_id="o1", customer_id="c1", items=[], total_cents=1250, placed_at=NOW)
    event = make_event("OrderPlaced", placed, aggregate_type="order", aggregate_id="o1")
    stored = Outcome("o1", "captured", 1250, "EUR", None, refunded=False, new=False)   # a redelivery's view
    handler = lambda e, fx: payment.project_charge(e, fx, stored)  # noqa: E731
    assert harness.deliver(handler, event, routing_key=payment.shard_slot).applied
    assert harness.deliver(handler, event, routing_key=payment.shard_slot).duplicate
    k = PaymentKeys("o1")
    assert harness.redis.hget(k.status, "o1") == b"captured"
    assert harness.redis.hmget(k.totals, "captured", "captured_cents") == [b"1", b"1250"]


def test_refund_and_void_projections(harness: EffectsHarness) -> None:
    for order_id, outcome, status in (
        ("o2", Outcome("o2", "captured", 700, "EUR", None, True, True), b"refunded"),
        ("o3", Outcome("o3", "voided", 0, "EUR", "x", False, True), b"voided"),
    ):
        cancelled = OrderCancelled(order_id=order_id, reason="customer", cancelled_at=NOW)
        event = make_event("OrderCancelled", cancelled, aggregate_type="order", aggregate_id=order_id)
        harness.deliver(lambda e, fx, o=outcome: payment.project_refund(e, fx, o), event, routing_key=payment.shard_slot)
        assert harness.redis.hget(PaymentKeys(order_id).status, order_id) == status
