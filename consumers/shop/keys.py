"""Where the shop keeps its state in Redis: every key of one event shares one hash tag.

Redis Cluster runs one script on one node, so every key an event's effects touch must hash to
one slot, the slot of the event's dedupe marker. The shop's keys are not tagged by the event's
aggregate, so each handler declares a routing key (``routing_key=`` in ``@app.handler``) naming a
key of the slot it writes:

- inventory: one stock ledger per warehouse, ``{shop.stock}`` (an order's lines are reserved
  together, all or nothing, so every SKU of one warehouse lives in one slot);
- payment and shipping: per-order state spread over ``SHARDS`` tags ``{shop.pay.<n>}`` /
  ``{shop.ship.<n>}`` chosen by a stable hash of the order id, so the projections scale out
  across the cluster while a shard's "ready" set stays in the slot of its orders.

Each event also counts itself in an ``applied`` hash (event id -> times applied) in the same slot:
the demo's "no event applied twice" check reads those counters.
"""

from __future__ import annotations

import zlib

SHARDS = 16
WAREHOUSE = "main"
#: First part of every hash tag. Tests set their own (monkeypatch) so they never touch the demo's keys.
PREFIX = "shop"


def shard_of(order_id: str) -> int:
    """The shard (0..SHARDS-1) of an order: CRC-32 of its id, stable across processes."""
    return zlib.crc32(order_id.encode("utf-8")) % SHARDS


class StockKeys:
    """Inventory keys of one warehouse (tag ``{shop.stock}``, or ``{shop.stock.<wh>}``)."""

    def __init__(self, warehouse: str = WAREHOUSE) -> None:
        tag = "{%s.stock}" % PREFIX if warehouse == WAREHOUSE else "{%s.stock.%s}" % (PREFIX, warehouse)
        self.available = f"{tag}:available"        # hash SKU -> units on the shelf, not reserved
        self.reserved = f"{tag}:reserved"          # hash SKU -> units held for open orders
        self.applied = f"{tag}:applied"            # hash event id -> times applied
        self.seeded = f"{tag}:seeded"              # hash SKU -> units put on the shelves
        self._tag = tag

    def reservation(self, order_id: str) -> str:
        return f"{self._tag}:res:{order_id}"       # hash SKU -> units, _status, _reason


class PaymentKeys:
    """Payment projection keys of the shard of one order (tag ``{shop.pay.<n>}``)."""

    def __init__(self, order_id: str) -> None:
        tag = "{%s.pay.%d}" % (PREFIX, shard_of(order_id))
        self.status = f"{tag}:status"              # hash order id -> captured|failed|voided|refunded
        self.totals = f"{tag}:totals"              # hash captured_cents, refunded_cents, captured, failed, ...
        self.applied = f"{tag}:applied"


class ShippingKeys:
    """Shipping projection keys of the shard of one order (tag ``{shop.ship.<n>}``)."""

    def __init__(self, order_id: str) -> None:
        tag = "{%s.ship.%d}" % (PREFIX, shard_of(order_id))
        self.order = f"{tag}:order:{order_id}"     # hash of saga facts (placed, captured, ...) in ms
        self.ready = f"{tag}:ready"                # set of order ids ready to ship
        self.ready_log = f"{tag}:ready_log"        # list "order_id placed_ms ready_ms"
        self.applied = f"{tag}:applied"


def shard_keys(kind: str) -> list[dict[str, str]]:
    """Every shard's shared keys of ``kind`` ("pay" or "ship"), for readers such as the demo."""
    out = []
    for n in range(SHARDS):
        tag = "{%s.%s.%d}" % (PREFIX, kind, n)
        if kind == "pay":
            out.append({"status": f"{tag}:status", "totals": f"{tag}:totals", "applied": f"{tag}:applied"})
        else:
            out.append({"ready": f"{tag}:ready", "ready_log": f"{tag}:ready_log", "applied": f"{tag}:applied"})
    return out


def key_patterns() -> list[str]:
    """SCAN patterns covering every key the shop writes (the demo resets them between runs)."""
    return ["{%s.stock*" % PREFIX, "{%s.pay.*" % PREFIX, "{%s.ship.*" % PREFIX]
