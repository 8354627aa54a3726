"""The payment provider's decisions and the payment topic's key: pure functions, no Redis
(the Redis projection: tests/integration/test_shop_payment.py)."""

from __future__ import annotations

from consumers.shop.payment_service import DECLINED_CARD, GOOD_CARD, payment_id_of, provider_charge


def test_provider_declines_the_test_card_and_missing_cards() -> None:
    assert provider_charge(GOOD_CARD, 100) == (True, None)
    assert provider_charge(DECLINED_CARD, 100) == (False, "card declined")
    assert provider_charge(None, 100) == (False, "no card on file")


def test_payment_events_of_one_order_share_a_key() -> None:
    assert payment_id_of("o-1") == "pay-o-1"   # Kafka key: capture and refund stay ordered
