"""Shipping consumer group: the projection of orders ready to ship.

    postbox consume consumers.shop.shipping:app

An order is ready to ship once it is placed and its payment captured, unless it was cancelled or
its payment failed. Each event adds one fact to the order's shipping state through the Lua
function ``consumers/lua/track_shipment.lua``, which keeps the shard's ``ready`` set right; facts
only accumulate, so the two topics may be consumed in any relative order.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from typing import Any

from postbox.consumer import App
from postbox.effects import Effects
from postbox.events import Event

from consumers.shop.keys import ShippingKeys
from consumers.shop.order_ref import OrderRef
from consumers.shop.payloads import OrderPlaced

app = App("shipping")

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
FACTS = {
    ("order", "OrderCancelled"): "cancelled",
    ("payment", "PaymentCaptured"): "captured",
    ("payment", "PaymentFailed"): "failed",
    ("payment", "PaymentRefunded"): "refunded",
}


def shard_slot(event: Event) -> str:
    """Routing key: the order's shipping shard (its marker lives with the projection it writes)."""
    return ShippingKeys(event.payload["order_id"]).ready


@app.handler("order", "OrderPlaced", routing_key=shard_slot)
def placed(event: Event[OrderPlaced], fx: Effects) -> None:
    """The order exists: its placing time (epoch ms) goes with the fact, for the ready log."""
    placed_ms = (event.payload.placed_at - EPOCH) // timedelta(milliseconds=1)
    record_fact(event, fx, event.payload.order_id, "placed", str(placed_ms))


@app.handler("order", "OrderCancelled", routing_key=shard_slot)
@app.handler("payment", ["PaymentCaptured", "PaymentFailed", "PaymentRefunded"], routing_key=shard_slot)
def track(event: Event[OrderRef], fx: Effects) -> None:
    record_fact(event, fx, event.payload.order_id, FACTS[(event.aggregate_type, event.event_type)])


def record_fact(event: Event[Any], fx: Effects, order_id: str, fact: str, placed_ms: str = "") -> None:
    k = ShippingKeys(order_id)
    now_ms = time.time_ns() // 1_000_000
    fx.call("track_shipment", keys=[k.order, k.ready, k.ready_log], args=[order_id, fact, now_ms, placed_ms])
    fx.hincrby(k.applied, event.id, 1)
