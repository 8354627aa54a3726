"""Review of #15/#17's EmitOptions: an option of the wrong type is refused before any SQL, naming
the option, as a misspelt one is (test_writer_options.py). Found by review: ``event_id`` given as
a str (even a valid UUID's text) or an int reached PostgreSQL ("column id is of type uuid but
expression is of type text"), which aborted the caller's transaction; ``version=True`` wrote the v1
schema; ``version="2"`` said "has no version 2 (known: v1, v2)"; ``traceparent=5`` raised a bare
"expected string or bytes-like object" naming nothing."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from typing import Any

import psycopg
import pytest

from postbox.outbox import NewEvent, Outbox

pytestmark = pytest.mark.integration
PLACED = {"order_id": "o", "customer_id": "c", "total_cents": 5, "placed_at": datetime(2024, 5, 6, tzinfo=timezone.utc),
          "items": [{"sku": "s", "quantity": 1, "unit_price_cents": 5}]}


@pytest.mark.parametrize(("option", "value"), [
    ("event_id", "01a22fb3-5a72-736c-9c98-362fecebddbd"),
    ("event_id", 123),
    ("version", True),
    ("version", "2"),
    ("traceparent", 5),
])
def test_an_option_of_the_wrong_type_is_refused_before_any_sql(pg_conn: psycopg.Connection, option: str, value: Any) -> None:
    outbox = Outbox()
    with outbox.transaction(pg_conn, pipeline=False) as tx:
        with pytest.raises(TypeError, match=option):
            outbox.emit(pg_conn, "order", f"k{uuid.uuid4()}", "OrderPlaced", PLACED, **{option: value})
        tx.emit("order", "good", "OrderPlaced", PLACED)  # nothing was sent: the transaction is still usable


@pytest.mark.parametrize(("option", "value"), [("version", True), ("version", "2"), ("traceparent", 5)])
def test_a_batch_event_with_an_option_of_the_wrong_type_is_refused_before_any_sql(
        pg_conn: psycopg.Connection, option: str, value: Any) -> None:
    outbox = Outbox()
    with outbox.transaction(pg_conn, pipeline=False) as tx:
        good = NewEvent("order", "good", "OrderPlaced", PLACED)
        bad = NewEvent("order", "bad", "OrderPlaced", PLACED, **{option: value})
        with pytest.raises(TypeError, match=option):
            outbox.emit_many(pg_conn, [good, bad])
        tx.emit("order", "good", "OrderPlaced", PLACED)  # nothing was sent: the transaction is still usable
