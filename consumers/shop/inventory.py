"""Inventory consumer group: reserve stock when an order is placed, release it when the order is
cancelled or its payment fails.

    postbox consume consumers.shop.inventory:app

The stock ledger is one warehouse's hashes under the tag ``{shop.stock}`` (see keys.py); the
reservation itself is the user Lua effect function ``consumers/lua/reserve_stock.lua``, which
checks every line before it changes any, so an order is reserved entirely or not at all and
stock never goes negative. The events of the order topic and of the payment topic are consumed
independently, so a PaymentFailed may arrive before its OrderPlaced: ``release_stock`` then
leaves a tombstone and the late reservation is skipped.
"""

from __future__ import annotations

from collections import Counter

from postbox.consumer import App
from postbox.effects import Effects
from postbox.events import Event

from consumers.shop.keys import StockKeys
from consumers.shop.order_ref import OrderRef
from consumers.shop.payloads import OrderPlaced

app = App("inventory")


def stock_slot(event: Event) -> str:
    """Routing key: every inventory event writes the warehouse's ledger (its marker lives there too)."""
    return StockKeys().available


@app.handler("order", "OrderPlaced", routing_key=stock_slot)
def reserve(event: Event[OrderPlaced], fx: Effects) -> None:
    order_id = event.payload.order_id
    stock = StockKeys()
    units: Counter[str] = Counter()
    for line in event.payload.items:
        units[line.sku] += line.quantity
    args: list[str | int] = [order_id]
    for sku, qty in sorted(units.items()):
        args += [sku, qty]
    fx.call("reserve_stock", keys=[stock.available, stock.reserved, stock.reservation(order_id)], args=args)
    fx.hincrby(stock.applied, event.id, 1)


@app.handler("order", "OrderCancelled", routing_key=stock_slot)
@app.handler("payment", "PaymentFailed", routing_key=stock_slot)
def release(event: Event[OrderRef], fx: Effects) -> None:
    order_id = event.payload.order_id
    stock = StockKeys()
    reason = "payment failed" if event.event_type == "PaymentFailed" else "order cancelled"
    fx.call("release_stock", keys=[stock.available, stock.reserved, stock.reservation(order_id)], args=[order_id, reason])
    fx.hincrby(stock.applied, event.id, 1)


@app.handler("payment", "PaymentCaptured")
@app.handler("payment", "PaymentRefunded")
def ignore(event: Event, fx: Effects) -> None:
    """Inventory reads the whole payment topic; captures and refunds change no stock
    (a refund follows an OrderCancelled, which already released it)."""
