"""Shipping consumer group: the projection of orders ready to ship.

    postbox consume consumers.shop.shipping:app

An order is ready to ship once it is placed and its payment captured, unless it was cancelled or
its payment failed. Each event adds one fact to the order's shipping state through the Lua
function ``consumers/lua/track_shipment.lua``, which keeps the shard's ``ready`` set right; facts
only accumulate, so the two topics may be consumed in any relative order.
"""

from __future__ import annotations

import time

from postbox.consumer import App
from postbox.effects import Effects
from postbox.events import Event

from consumers.shop.keys import ShippingKeys

app = App("shipping")

FACTS = {
    ("order", "OrderPlaced"): "placed",
    ("order", "OrderCancelled"): "cancelled",
    ("payment", "PaymentCaptured"): "captured",
    ("payment", "PaymentFailed"): "failed",
    ("payment", "PaymentRefunded"): "refunded",
}


def shard_slot(event: Event) -> str:
    """Routing key: the order's shipping shard (its marker lives with the projection it writes)."""
    return ShippingKeys(event.payload["order_id"]).ready


@app.handler("order", ["OrderPlaced", "OrderCancelled"], routing_key=shard_slot)
@app.handler("payment", ["PaymentCaptured", "PaymentFailed", "PaymentRefunded"], routing_key=shard_slot)
def track(event: Event, fx: Effects) -> None:
    order_id = event.payload["order_id"]
    fact = FACTS[(event.aggregate_type, event.event_type)]
    placed_ms = ""
    if fact == "placed":
        placed_ms = _epoch_ms(event.payload["placed_at"])
    k = ShippingKeys(order_id)
    now_ms = time.time_ns() // 1_000_000
    fx.call("track_shipment", keys=[k.order, k.ready, k.ready_log], args=[order_id, fact, now_ms, placed_ms])
    fx.hincrby(k.applied, event.id, 1)


def _epoch_ms(value: object) -> str:
    if hasattr(value, "timestamp"):
        return str(int(value.timestamp() * 1000))  # type: ignore[union-attr]
    return str(int(value))  # type: ignore[arg-type]
