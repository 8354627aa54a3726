"""The effects engine and the handler test harness on the shared stack's Redis (`postbox up`)."""

from __future__ import annotations

import pytest

from postbox.effects import Effects, EffectsEngine, EventRef, PermanentEffectError, aggregate_keys, check_durability
from postbox.events import Event
from postbox.testing import EffectsHarness, make_event

pytestmark = pytest.mark.integration


def on_order_paid(event: Event, fx: Effects) -> None:
    k = aggregate_keys(event.aggregate_type, event.aggregate_id)
    fx.hset(k("state"), {"status": "paid", "by": event.payload["by"]})
    fx.hincrby(k("totals"), "paid_cents", event.payload["cents"])
    fx.xadd(k("history"), {"type": event.event_type}, maxlen=100)


def test_stack_redis_is_durable(redis_client) -> None:
    verdict = check_durability(redis_client)
    assert verdict.durable, str(verdict)


def test_engine_dedupes_on_the_stack(redis_client, unique: str) -> None:
    engine = EffectsEngine(redis_client, f"stack-{unique}", functions_dir=None)
    k = aggregate_keys("order", unique)
    fx = Effects().incrby(k("n"), 2)
    ref = EventRef.for_aggregate(f"ev-{unique}", "order", unique)
    try:
        assert engine.apply_one(ref, fx).applied
        assert engine.apply_one(ref, fx).duplicate
        assert redis_client.get(k("n")) == b"2"
    finally:
        redis_client.delete(k("n"), engine.marker_key(ref))


def test_harness_shows_a_redelivered_event_applied_once(settings, unique: str) -> None:
    with EffectsHarness(settings.redis_url, cleanup=True) as h:
        event = make_event("OrderPaid", {"cents": 500, "by": "card"}, aggregate_type="order", aggregate_id=unique)
        assert h.deliver(on_order_paid, event).applied
        assert h.deliver(on_order_paid, event).duplicate
        k = aggregate_keys("order", unique)
        assert h.redis.hgetall(k("state")) == {b"status": b"paid", b"by": b"card"}
        assert h.redis.hget(k("totals"), "paid_cents") == b"500"
        assert h.redis.xlen(k("history")) == 1
        later = make_event("OrderPaid", {"cents": 250, "by": "cash"}, aggregate_type="order", aggregate_id=unique)
        assert [r.outcome.value for r in h.deliver_all(on_order_paid, [event, later])] == ["duplicate", "applied"]
        assert h.redis.hget(k("totals"), "paid_cents") == b"750"
        touched = set(h.touched)
    assert not h.redis.exists(*touched)  # the harness cleaned up after itself


def test_harness_reports_failures_and_mixed_slots(admin_redis_url, unique: str) -> None:
    # Admin user: the cross-slot handler's untagged keys are outside the consumer ACL's key patterns.
    def bad_handler(event: Event, fx: Effects) -> None:
        fx.set(f"{{{unique}}}:s", "text").hincrby(f"{{{unique}}}:s", "f", 1)

    def cross_slot_handler(event: Event, fx: Effects) -> None:
        fx.set(f"a:{unique}", 1).set(f"b:{unique}", 2)

    with EffectsHarness(admin_redis_url, cluster=True, cleanup=True) as h:  # held to Redis Cluster's one-slot rule
        with pytest.raises(PermanentEffectError, match="WRONGTYPE"):
            h.deliver(bad_handler, make_event("X"), routing_key=lambda e: f"{{{unique}}}")
        assert not h.redis.exists(f"{{{unique}}}:s")
        assert h.failures()[-1]["op"] == "hincrby"
        with pytest.raises(PermanentEffectError, match="hash tag"):
            h.deliver(cross_slot_handler, make_event("Y"))
