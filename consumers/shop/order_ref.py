"""What a shop handler registered for several event types reads: the order they all name.

A payload class may declare a subset of a schema's fields (the consumer checks each field it
declares against every event type the handler is registered for, and drops the others), so one
small class serves handlers that react to OrderCancelled, PaymentFailed and the rest alike. Handlers
of a single event type read its generated class from ``consumers/shop/payloads.py`` instead.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OrderRef:
    """The order an event is about (every event of the saga carries ``order_id``)."""

    order_id: str
