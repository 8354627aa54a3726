"""#16.1 typed payloads: a handler annotated ``Event[SomeClass]`` gets the class, built and checked;
a class that does not fit the event's schema is refused when the app starts, naming the handler,
the field and the schema file; untyped handlers are unchanged."""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass
from datetime import date, datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any, NotRequired, TypedDict

import pytest

from postbox.consumer import ANY, App
from postbox.consumer.config import ConsumerConfig
from postbox.consumer.reader_schemas import load_reader_codec, reader_schema_lookup
from postbox.effects import Effects
from postbox.errors import ConfigError, HandlerRegistrationError, PayloadTypeError
from postbox.events import Event
from postbox.payloads import check_routes
from postbox.schemas.repository import SchemaRepository
from postbox.testing import make_event

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
REPO = SchemaRepository.load(SCHEMAS)


class LineItem(TypedDict):
    sku: str
    quantity: int


@dataclass(frozen=True)
class Placed:
    order_id: str
    items: list[LineItem]
    placed_at: datetime
    coupon: str | None
    note: str = "none"  # not in the schema, has a default: allowed


@dataclass
class WrongType:
    order_id: str
    total_cents: str


@dataclass
class MissingField:
    order_id: str
    shipped_to: str


@dataclass
class NotOptional:
    order_id: str
    coupon: str


@dataclass
class DateNotTimestamp:
    placed_at: date


class Captured(TypedDict):
    payment_id: str
    amount_cents: int
    captured_at: datetime
    note: NotRequired[str]


def _check(app: App) -> None:
    check_routes(app.routes, reader_schema_lookup(REPO, app.reader_versions), wildcard=ANY)


def _placed(**over: Any) -> dict[str, Any]:
    payload = {"order_id": "o-1", "customer_id": "c-1", "items": [{"sku": "A", "quantity": 2, "unit_price_cents": 100}],
               "total_cents": 200, "placed_at": datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc), "currency": "EUR", "coupon": None}
    payload.update(over)
    return payload


def test_a_typed_handler_receives_its_dataclass_with_nested_records_built() -> None:
    app, seen = App("t"), []

    @app.handler("order", "OrderPlaced")
    def on_placed(event: Event[Placed], fx: Effects) -> None:
        seen.append(event)

    _check(app)
    app(make_event("OrderPlaced", _placed(), aggregate_type="order"), Effects())
    (event,) = seen
    assert event.payload == Placed("o-1", [{"sku": "A", "quantity": 2}], datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc), None)
    assert event.event_type == "OrderPlaced" and event.aggregate_type == "order"  # the metadata is the event's
    assert app.route("order", "OrderPlaced").name == "test_a_typed_handler_receives_its_dataclass_with_nested_records_built.<locals>.on_placed"


def test_a_typeddict_payload_and_an_async_typed_handler() -> None:
    app, seen = App("t"), []

    @app.handler("payment", "PaymentCaptured")
    async def on_captured(event: Event[Captured], fx: Effects) -> None:
        await asyncio.sleep(0)
        seen.append(event.payload)

    assert app.route("payment", "PaymentCaptured").is_async
    _check(app)
    at = datetime(2026, 1, 1, tzinfo=timezone.utc)
    app(make_event("PaymentCaptured", {"payment_id": "p", "order_id": "o", "amount_cents": 5, "currency": "EUR", "captured_at": at},
                   aggregate_type="payment"), Effects())
    assert seen == [{"payment_id": "p", "amount_cents": 5, "captured_at": at}]


def test_untyped_handlers_keep_their_mapping_and_are_not_wrapped() -> None:
    app, seen = App("t"), []

    def plain(event: Event, fx: Effects) -> None:
        seen.append(event.payload)

    def any_payload(event: Event[Any], fx: Effects) -> None:
        seen.append(event.payload)

    app.add("order", "OrderPlaced", plain)
    app.add("order", "OrderCancelled", any_payload)
    assert app.route("order", "OrderPlaced").handler is plain
    _check(app)
    app(make_event("OrderPlaced", {"order_id": "x"}, aggregate_type="order"), Effects())
    app(make_event("OrderCancelled", {"order_id": "y"}, aggregate_type="order"), Effects())
    assert seen == [{"order_id": "x"}, {"order_id": "y"}]


@pytest.mark.parametrize(
    ("cls", "field", "words"),
    [
        (WrongType, "total_cents", "is long in the schema but annotated str: annotate it int"),
        (MissingField, "shipped_to", "is required by MissingField but OrderPlaced has no such field"),
        (NotOptional, "coupon", "is optional in the schema (null | string) but annotated str: annotate it str | None"),
        (DateNotTimestamp, "placed_at", "is long (timestamp-millis) in the schema but annotated date: annotate it datetime"),
    ],
)
def test_a_class_that_does_not_fit_the_schema_is_refused_at_start_naming_handler_field_and_file(cls: type, field: str, words: str, tmp_path: Path) -> None:
    app = App("t", schemas_dir=SCHEMAS)

    def on_placed(event: Event[Any], fx: Effects) -> None: ...

    on_placed.__annotations__["event"] = Event[cls]  # type: ignore[valid-type]
    app.add("order", "OrderPlaced", on_placed)
    config = ConsumerConfig.load({}, app=app)
    with pytest.raises(ConfigError) as caught:
        load_reader_codec(app, config)
    text = str(caught.value)
    assert "handler " + on_placed.__qualname__ in text
    assert f"field {field!r} of {cls.__name__} {words}" in text
    assert str(SCHEMAS / "order" / "OrderPlaced.v2.avsc") in text


def test_the_check_uses_the_pinned_reader_version() -> None:
    app = App("t", reader_versions={("order", "OrderPlaced"): 1})

    @app.handler("order", "OrderPlaced")
    def on_placed(event: Event[Placed], fx: Effects) -> None: ...

    with pytest.raises(ConfigError, match=r"field 'coupon' of Placed is required by Placed but OrderPlaced has no such field.*OrderPlaced.v1.avsc"):
        _check(app)


def test_a_typed_handler_on_a_wildcard_is_refused_at_start() -> None:
    app = App("t")

    @app.handler("order")
    def everything(event: Event[Placed], fx: Effects) -> None: ...

    with pytest.raises(ConfigError, match="registered for a wildcard"):
        _check(app)


def test_a_payload_that_does_not_fit_the_class_fails_naming_the_field() -> None:
    app = App("t")

    @app.handler("order", "OrderPlaced")
    def on_placed(event: Event[Placed], fx: Effects) -> None: ...

    bad = make_event("OrderPlaced", _placed(items=[{"sku": "A", "quantity": "2"}]), aggregate_type="order")
    with pytest.raises(PayloadTypeError, match=r"field 'items\[0\].quantity' = '2': expected int, got str") as caught:
        app(bad, Effects())
    assert caught.value.field == "items[0].quantity"
    with pytest.raises(PayloadTypeError, match="field 'order_id' is missing"):
        app(make_event("OrderPlaced", {"items": [], "placed_at": datetime.now(timezone.utc), "coupon": None}, aggregate_type="order"), Effects())


def test_an_annotation_that_is_not_a_payload_class_or_cannot_be_resolved_is_named() -> None:
    app = App("t")

    def ints(event: Event[int], fx: Effects) -> None: ...

    def unknown(event: "Event[NoSuchClass]", fx: Effects) -> None: ...  # type: ignore[name-defined]  # noqa: F821

    app.add("order", "OrderPlaced", ints)
    app.add("order", "OrderCancelled", unknown)
    with pytest.raises(ConfigError) as caught:
        _check(app)
    assert "Event[int]" in str(caught.value) and "NoSuchClass" in str(caught.value)
    with pytest.raises(HandlerRegistrationError, match="NoSuchClass"):
        app(make_event("OrderCancelled", {}, aggregate_type="order"), Effects())


@dataclass(frozen=True)
class Money:
    amount: Decimal
    on: date


def test_decimal_and_date_scalars_are_held_to_their_types() -> None:
    from postbox.payloads import PayloadBuilder

    build = PayloadBuilder(Money)
    assert build({"amount": Decimal("1.50"), "on": date(2026, 1, 1)}) == Money(Decimal("1.50"), date(2026, 1, 1))
    with pytest.raises(PayloadTypeError, match="expected date, got datetime"):
        build({"amount": Decimal("1"), "on": datetime(2026, 1, 1)})
    with pytest.raises(PayloadTypeError, match="expected Decimal, got float"):
        build({"amount": 1.5, "on": date(2026, 1, 1)})
    instance = Money(Decimal("2"), date(2026, 1, 1))
    assert build(instance) is instance and dataclasses.is_dataclass(build(instance))
