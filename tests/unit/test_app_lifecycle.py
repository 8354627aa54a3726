"""#16.2 start-up and shutdown hooks on App, and resources handed to handlers by parameter name
(the real process on SIGTERM: tests/integration/test_consumer_lifecycle.py)."""

from __future__ import annotations

import pytest

from postbox.consumer import App
from postbox.effects import Effects
from postbox.errors import ConfigError, HandlerRegistrationError
from postbox.events import Event


def _event(seq: int = 1) -> Event:
    return Event(id=f"e{seq}", aggregate_type="order", aggregate_id="o1", event_type="Placed", payload={"seq": seq})


def _app(calls: list[str], fail: str | None = None) -> App:
    app = App("t")

    @app.on_startup
    def pool() -> dict[str, int]:
        calls.append("start pool")
        return {"opened": 1}

    @app.on_startup
    def cache(pool: dict[str, int]) -> list[int]:
        calls.append(f"start cache with pool {pool['opened']}")
        if fail == "cache":
            raise OSError("cache host down")
        return []

    @app.on_startup
    def last() -> str:
        calls.append("start last")
        return "last"

    @app.on_shutdown
    def close_pool(pool: dict[str, int]) -> None:
        calls.append("stop pool")

    @app.on_shutdown
    def close_cache(cache: list[int]) -> None:
        calls.append(f"stop cache {cache}")

    @app.handler("order", "Placed")
    def placed(event: Event, fx: Effects, cache: list[int]) -> None:
        cache.append(event.payload["seq"])

    return app


def test_hooks_run_once_in_order_and_shutdown_in_reverse() -> None:
    calls: list[str] = []
    app = _app(calls)
    with app.started() as resources:
        app.start()  # a second start while running does nothing
        assert set(resources) == {"pool", "cache", "last"}
        app(_event(1), Effects())
        app(_event(2), Effects())
    app.stop()  # and a second stop neither
    assert calls == ["start pool", "start cache with pool 1", "start last", "stop cache [1, 2]", "stop pool"]
    assert app.resources == {}


def test_a_failing_startup_hook_names_itself_and_closes_only_what_was_opened() -> None:
    calls: list[str] = []
    app = _app(calls, fail="cache")
    with pytest.raises(ConfigError) as caught:
        app.start()
    assert "start-up hook cache failed: OSError: cache host down" in str(caught.value)
    assert calls == ["start pool", "start cache with pool 1", "stop pool"]  # close_cache: cache was never made


def test_a_handler_parameter_naming_no_startup_hook_is_refused_at_start() -> None:
    app = App("t")

    @app.handler("order", "Placed")
    def placed(event: Event, fx: Effects, db: object) -> None: ...

    with pytest.raises(ConfigError) as caught:
        app.start()
    assert "handler" in str(caught.value) and "placed" in str(caught.value) and "'db'" in str(caught.value)


def test_a_startup_hook_taking_a_later_resource_is_refused() -> None:
    app = App("t")

    @app.on_startup
    def first(second: object) -> None: ...

    @app.on_startup
    def second() -> None: ...

    with pytest.raises(ConfigError, match="start-up hook first takes 'second'"):
        app.start()


def test_async_hooks_are_refused_at_registration() -> None:
    app = App("t")
    with pytest.raises(HandlerRegistrationError, match="is async"):
        @app.on_startup
        async def pool() -> None: ...


def test_a_handler_with_resources_outside_a_started_app_says_how_to_start_it() -> None:
    app = _app([])
    with pytest.raises(ConfigError, match="app.started"):
        app(_event(), Effects())


def test_async_handlers_receive_resources_too() -> None:
    app = App("t")
    seen: list[int] = []

    @app.on_startup
    def sink() -> list[int]:
        return seen

    @app.handler("order", "Placed")
    async def placed(event: Event, fx: Effects, sink: list[int]) -> None:
        sink.append(event.payload["seq"])

    assert app.routes[0].is_async and app.routes[0].name.endswith("placed")
    with app.started():
        app(_event(3), Effects())
    assert seen == [3]


def test_a_parameter_with_a_default_is_not_a_resource() -> None:
    app = App("t")
    seen: list[int] = []

    @app.handler("order", "Placed")
    def placed(event: Event, fx: Effects, factor: int = 2) -> None:
        seen.append(event.payload["seq"] * factor)

    app(_event(4), Effects())
    assert seen == [8]
