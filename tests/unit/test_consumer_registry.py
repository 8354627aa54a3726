"""App: registration, lookup order, signature checks, calling the app as a handler; loading MODULE:APP."""

from __future__ import annotations

import pytest

from postbox.consumer import App, load_app
from postbox.effects import Effects
from postbox.errors import AppImportError, HandlerRegistrationError, NoHandlerError
from postbox.testing import make_event


def test_lookup_order_exact_then_aggregate_wildcard_then_event_type_then_catch_all():
    app = App("g")
    exact = app.handler("order", "OrderPlaced")(lambda e, fx: None)
    agg_any = app.handler("order")(lambda e, fx: None)
    type_any = app.handler("*", "Audit")(lambda e, fx: None)
    with pytest.raises(NoHandlerError) as info:
        app.route("payment", "PaymentFailed")
    assert "payment/PaymentFailed" in str(info.value) and info.value.fix
    fallback = app.catch_all(lambda e, fx: None)
    assert app.route("order", "OrderPlaced").handler is exact
    assert app.route("order", "OrderCancelled").handler is agg_any
    assert app.route("order", "Audit").handler is agg_any
    assert app.route("payment", "Audit").handler is type_any
    assert app.route("payment", "PaymentFailed").handler is fallback
    assert app.aggregate_types == ["order"]
    assert app.topics() == ["outbox.event.order"]
    assert app.routes[-1].handler is fallback


def test_several_event_types_and_explicit_topics():
    app = App("g", topics=["custom.topic"])

    @app.handler("payment", ["PaymentCaptured", "PaymentFailed"])
    def on_payment(event, fx):
        pass

    assert app.route("payment", "PaymentFailed").handler is on_payment
    assert app.topics() == ["custom.topic"]


def test_duplicates_and_bad_handlers_are_refused_at_registration():
    app = App("g")
    app.add("order", "OrderPlaced", lambda e, fx: None)
    with pytest.raises(HandlerRegistrationError, match="already has handler"):
        app.add("order", "OrderPlaced", lambda e, fx: None)
    app.catch_all(lambda e, fx: None)
    with pytest.raises(HandlerRegistrationError, match="catch-all is already"):
        app.catch_all(lambda e, fx: None)
    with pytest.raises(HandlerRegistrationError, match=r"handler\(event, fx\)"):
        app.add("order", "X", lambda event: None)
    with pytest.raises(HandlerRegistrationError, match="not callable"):
        app.add("order", "Y", 42)  # type: ignore[arg-type]
    with pytest.raises(HandlerRegistrationError, match="event type"):
        app.add("order", "bad name", lambda e, fx: None)
    with pytest.raises(HandlerRegistrationError):
        app.handler("order", [])


def test_async_handlers_are_detected_and_the_app_is_a_handler():
    app = App("g")

    @app.handler("order", "OrderPlaced")
    async def placed(event, fx):
        fx.incrby("{order:1}:n", event.payload["n"])

    assert app.route("order", "OrderPlaced").is_async
    fx = Effects()
    app(make_event("OrderPlaced", {"n": 3}, aggregate_type="order", aggregate_id="1"), fx)
    assert len(fx) == 1 and fx.commands[0].op == "incrby"


def test_load_app_from_module_path():
    app = load_app("tests.apps.counting:strict")
    assert isinstance(app, App) and app.route("anything", "Counted")
    with pytest.raises(AppImportError, match="MODULE:APP"):
        load_app("tests.apps.counting")
    with pytest.raises(AppImportError, match="cannot import module"):
        load_app("tests.apps.nope:app")
    with pytest.raises(AppImportError, match="no attribute"):
        load_app("tests.apps.counting:missing")
    with pytest.raises(AppImportError, match="not a postbox.consumer.App"):
        load_app("tests.apps.counting:seq_of.__name__")
