"""Emit takes the payload classes `postbox schemas codegen` writes, as the test harness does.

Found following the README as a new user: with `payloads.py` generated, the natural
`outbox.emit(conn, "user", uid, "SignedUp", SignedUp(...))` raised "PayloadError: payload expected
a record (dict) SignedUp, got SignedUp" while `postbox.testing.make_event` took the same instance.
Shown to fail before the fix: both tests raised that PayloadError."""

from __future__ import annotations

import uuid
from dataclasses import asdict
from datetime import datetime, timezone

from consumers.shop.payloads import LineItem, OrderPlaced
from postbox.outbox.rows import NewEvent, RowFactory
from pathlib import Path

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
PLACED = OrderPlaced(order_id="42", customer_id="c-7", items=[LineItem(sku="A", quantity=2, unit_price_cents=250)],
                     total_cents=500, placed_at=datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc))


def _row(factory: RowFactory, payload: object, event_id: uuid.UUID) -> tuple[object, ...]:
    return factory.prepare("order", "42", "OrderPlaced", payload, event_id=event_id, traceparent=None).params


def test_a_generated_class_encodes_as_its_mapping_in_avro_and_json() -> None:
    event_id = uuid.uuid4()
    for factory in (RowFactory(schemas_dir=SCHEMAS), RowFactory(encoding="json")):
        assert _row(factory, PLACED, event_id) == _row(factory, asdict(PLACED), event_id), factory.encoding


def test_batch_emit_takes_generated_classes_too() -> None:
    factory = RowFactory(schemas_dir=SCHEMAS)
    (row,) = factory.prepare_many([NewEvent("order", "42", "OrderPlaced", PLACED)])
    assert row.params
