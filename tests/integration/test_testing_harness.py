"""#16.5 `postbox.testing`: test events are held to their schema as production holds them (a
missing field fails the test naming the field), the harness's hash-slot strictness follows the
deployment it is told about (`cluster=`), and `effects_of()` runs a handler with no Redis at all."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pytest

from postbox.consumer import App
from postbox.effects import Effects, aggregate_keys
from postbox.errors import ConfigError, PayloadError, PermanentEffectError
from postbox.events import Event
from postbox.testing import EffectsHarness, effects_of, make_event

pytestmark = pytest.mark.integration  # the harness applies to the stack's Redis

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
PLACED = {"order_id": "o-1", "customer_id": "c-1", "items": [{"sku": "A", "quantity": 2, "unit_price_cents": 150}],
          "total_cents": 300, "placed_at": 1_767_225_600_123}


def on_placed(event: Event, fx: Effects) -> None:
    k = aggregate_keys("order", event.aggregate_id)
    fx.hset(k("state"), {"total": event.payload["total_cents"], "at": event.payload["placed_at"].isoformat(),
                         "currency": event.payload["currency"]})


def test_a_test_event_missing_a_field_fails_naming_it_as_emit_would_in_production(unique: str) -> None:
    missing = {k: v for k, v in PLACED.items() if k != "customer_id"}
    with EffectsHarness(schemas_dir=SCHEMAS) as h:
        with pytest.raises(PayloadError, match=r"order/OrderPlaced .*field 'customer_id' is missing") as caught:
            h.deliver(on_placed, make_event("OrderPlaced", missing, aggregate_type="order", aggregate_id=unique))
        assert caught.value.field == "customer_id" and "OrderPlaced.v2.avsc" in str(caught.value)
        with pytest.raises(PayloadError, match="field 'totl_cents'.* is not a field of the schema"):
            h.deliver(on_placed, make_event("OrderPlaced", {**PLACED, "totl_cents": 1}, aggregate_type="order", aggregate_id=unique))
        assert h.touched == set()  # nothing ran, nothing applied
    with pytest.raises(PayloadError, match="field 'customer_id' is missing"):
        effects_of(on_placed, make_event("OrderPlaced", missing, aggregate_type="order"), schemas_dir=SCHEMAS)


def test_the_handler_gets_the_payload_production_delivers(unique: str) -> None:
    with EffectsHarness(schemas_dir=SCHEMAS) as h:
        assert h.deliver(on_placed, make_event("OrderPlaced", PLACED, aggregate_type="order", aggregate_id=unique)).applied
        state = h.redis.hgetall(aggregate_keys("order", unique)("state"))
    # epoch millis became an aware UTC datetime; the v2 default filled the currency
    assert state == {b"total": b"300", b"at": b"2026-01-01T00:00:00.123000+00:00", b"currency": b"EUR"}


def test_cross_slot_effects_follow_the_deployment_the_harness_is_told_about(admin_redis_url: str, unique: str) -> None:
    # Admin user: the untagged keys are outside the consumer ACL's key patterns.
    def two_slots(event: Event, fx: Effects) -> None:
        fx.set(f"a:{unique}", 1).set(f"b:{unique}", 2)

    with EffectsHarness(admin_redis_url, cleanup=True) as single:  # a single Redis, as the app runs without Cluster
        assert single.deliver(two_slots, make_event("Y")).applied
        assert single.redis.get(f"a:{unique}") == b"1" and single.redis.get(f"b:{unique}") == b"2"
    with EffectsHarness(admin_redis_url, cluster=True, cleanup=True) as clustered:  # production is a Cluster
        with pytest.raises(PermanentEffectError, match="hash tag") as caught:
            clustered.deliver(two_slots, make_event("Y"))
        assert f"a:{unique}" in str(caught.value) and not clustered.redis.exists(f"a:{unique}")


@dataclass(frozen=True)
class PlacedTotal:
    order_id: str
    total_cents: str  # the schema says long


def test_a_typed_app_that_does_not_fit_its_schema_fails_the_first_delivery(unique: str) -> None:
    app = App("t", schemas_dir=SCHEMAS)

    @app.handler("order", "OrderPlaced")
    def typed(event: Event[PlacedTotal], fx: Effects) -> None: ...

    with EffectsHarness() as h, pytest.raises(ConfigError, match="field 'total_cents' of PlacedTotal is long in the schema but annotated str"):
        h.deliver(app, make_event("OrderPlaced", PLACED, aggregate_type="order", aggregate_id=unique))


def test_effects_of_needs_no_redis(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POSTBOX_REDIS_URL", "redis://127.0.0.1:1/0")  # nothing listens there
    fx = effects_of(on_placed, make_event("OrderPlaced", PLACED, aggregate_type="order", aggregate_id="42"), schemas_dir=SCHEMAS)
    assert [c.op for c in fx.commands] == ["hset"] and fx.keys() == [b"{order:42}:state"]
    assert effects_of(on_placed, make_event("OrderPlaced", {**PLACED, "placed_at": datetime(2026, 1, 1, tzinfo=timezone.utc)},
                                            aggregate_type="order", aggregate_id="42"), schemas_dir=SCHEMAS).keys() == [b"{order:42}:state"]
