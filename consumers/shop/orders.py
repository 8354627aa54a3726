"""The order service: the producer side of the saga.

Each function is one PostgreSQL transaction holding the business change *and* its event (the
transactional outbox): either both commit or neither does, so no order exists without its
OrderPlaced and no OrderPlaced without its order. Both functions are idempotent, so a client
retrying after a lost reply changes nothing and emits nothing twice::

    import psycopg
    from consumers.shop.orders import place_order, cancel_order

    with psycopg.connect(url) as conn:          # POSTBOX_DATABASE_URL (role postbox_app)
        place_order(conn, "o-1001", "c-42", [{"sku": "SKU-007", "quantity": 2, "unit_price_cents": 1250}])
        cancel_order(conn, "o-1001", reason="customer changed their mind")
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

import psycopg

from postbox import outbox
from postbox.outbox import EmittedEvent, Outbox

AGGREGATE = "order"


def place_order(
    conn: psycopg.Connection[Any],
    order_id: str,
    customer_id: str,
    items: Sequence[Mapping[str, Any]],
    *,
    currency: str = "EUR",
    coupon: str | None = None,
    schema_version: int | None = None,
    writer: Outbox | None = None,
) -> EmittedEvent | None:
    """Insert the order and emit ``OrderPlaced`` in one transaction.

    Returns the emitted event, or None when the order already existed (a retried call).
    ``schema_version=1`` emits the old OrderPlaced v1 (no currency/coupon, EUR only), as a client
    that was not upgraded yet would: consumers read both versions into their reader schema.
    """
    lines = [
        {"sku": str(i["sku"]), "quantity": int(i["quantity"]), "unit_price_cents": int(i["unit_price_cents"])}
        for i in items
    ]
    if not lines:
        raise ValueError(f"order {order_id}: an order needs at least one line")
    if schema_version == 1 and (currency != "EUR" or coupon is not None):
        raise ValueError("OrderPlaced v1 has no currency or coupon: v1 orders are EUR without coupon")
    total = sum(line["quantity"] * line["unit_price_cents"] for line in lines)
    placed_at = datetime.now(timezone.utc)
    payload: dict[str, Any] = {
        "order_id": order_id, "customer_id": customer_id, "items": lines,
        "total_cents": total, "placed_at": placed_at,
    }
    if schema_version != 1:
        payload.update(currency=currency, coupon=coupon)
    emit = (writer or outbox.default_outbox()).emit
    with conn.transaction():
        inserted = conn.execute(
            "INSERT INTO shop.orders (id, customer_id, items, total_cents, currency, coupon, placed_at)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (id) DO NOTHING RETURNING id",
            (order_id, customer_id, json.dumps(lines), total, currency, coupon, placed_at),
        ).fetchone()
        if inserted is None:
            return None
        return emit(conn, AGGREGATE, order_id, "OrderPlaced", payload, version=schema_version)


def cancel_order(
    conn: psycopg.Connection[Any],
    order_id: str,
    *,
    reason: str = "cancelled by the customer",
    writer: Outbox | None = None,
) -> EmittedEvent | None:
    """Mark a placed order cancelled and emit ``OrderCancelled`` in one transaction.

    Returns None (and emits nothing) when the order does not exist or is already cancelled.
    """
    emit = (writer or outbox.default_outbox()).emit
    now = datetime.now(timezone.utc)
    with conn.transaction():
        updated = conn.execute(
            "UPDATE shop.orders SET status = 'cancelled', cancel_reason = %s, cancelled_at = %s"
            " WHERE id = %s AND status = 'placed' RETURNING id",
            (reason, now, order_id),
        ).fetchone()
        if updated is None:
            return None
        return emit(conn, AGGREGATE, order_id, "OrderCancelled",
                    {"order_id": order_id, "reason": reason, "cancelled_at": now})
