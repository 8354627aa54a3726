"""Payment projection (Redis, exactly once per event) and the provider's decisions."""

from __future__ import annotations

import uuid

import pytest

from consumers.shop import keys, payment
from consumers.shop.keys import PaymentKeys
from consumers.shop.payment_service import DECLINED_CARD, GOOD_CARD, Outcome, payment_id_of, provider_charge
from postbox.testing import EffectsHarness, make_event


@pytest.fixture
def harness(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(keys, "PREFIX", f"test{uuid.uuid4().hex[:8]}")
    with EffectsHarness() as h:
        yield h


def test_provider_declines_the_test_card_and_missing_cards() -> None:
    assert provider_charge(GOOD_CARD, 100) == (True, None)
    assert provider_charge(DECLINED_CARD, 100) == (False, "card declined")
    assert provider_charge(None, 100) == (False, "no card on file")


def test_charge_projection_applies_once_even_when_the_database_work_was_replayed(harness: EffectsHarness) -> None:
    event = make_event("OrderPlaced", {"order_id": "o1"}, aggregate_type="order", aggregate_id="o1")
    stored = Outcome("o1", "captured", 1250, "EUR", None, refunded=False, new=False)   # a redelivery's view
    handler = lambda e, fx: payment.project_charge(e, fx, stored)  # noqa: E731
    assert harness.deliver(handler, event).applied
    assert harness.deliver(handler, event).duplicate
    k = PaymentKeys("o1")
    assert harness.redis.hget(k.status, "o1") == b"captured"
    assert harness.redis.hmget(k.totals, "captured", "captured_cents") == [b"1", b"1250"]


def test_refund_and_void_projections(harness: EffectsHarness) -> None:
    for order_id, outcome, status in (
        ("o2", Outcome("o2", "captured", 700, "EUR", None, True, True), b"refunded"),
        ("o3", Outcome("o3", "voided", 0, "EUR", "x", False, True), b"voided"),
    ):
        event = make_event("OrderCancelled", {"order_id": order_id}, aggregate_type="order", aggregate_id=order_id)
        harness.deliver(lambda e, fx, o=outcome: payment.project_refund(e, fx, o), event)
        assert harness.redis.hget(PaymentKeys(order_id).status, order_id) == status


def test_payment_events_of_one_order_share_a_key() -> None:
    assert payment_id_of("o-1") == "pay-o-1"   # Kafka key: capture and refund stay ordered
