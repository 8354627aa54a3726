"""#14.1: one handler-invoking path (``postbox.consumer.invoke``) for the runtime, ``App.__call__``
and ``postbox.testing`` — no services.

Before it, ``App.__call__`` and the harness each called handlers their own way; the harness ran an
``async def`` handler by calling it and dropping the coroutine (APPLIED, no effects, one
RuntimeWarning), and a handler returning a value was not noticed anywhere.
"""

from __future__ import annotations

import asyncio
import functools
import warnings

import pytest

from postbox import failure_classes as classes
from postbox.consumer import App
from postbox.consumer.backoff import Backoff
from postbox.consumer.invoke import HandlerFailed, HandlerResultError, Invoker, run
from postbox.effects import Effects
from postbox.testing import make_event


async def async_handler(event, fx: Effects) -> None:
    await asyncio.sleep(0)  # the effects are described after a suspension point
    fx.hincrby("{test:1}:n", "calls", 1)


def returns_number(event, fx: Effects) -> int:
    fx.hincrby("{test:1}:n", "calls", 1)
    return 42


def returns_other_effects(event, fx: Effects) -> Effects:
    fx.hincrby("{test:1}:n", "calls", 1)
    return Effects().hincrby("{test:1}:n", "other", 1)


def chained(event, fx: Effects) -> Effects:
    return fx.hincrby("{test:1}:n", "calls", 1)  # returning the fx it was given is fine


def test_async_handler_is_run_to_completion_and_its_effects_kept():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a never-awaited coroutine would warn
        fx = run(async_handler, make_event("E"))
    assert [(c.op, c.keys) for c in fx.commands] == [("hincrby", (b"{test:1}:n",))]


def test_sync_callable_returning_a_coroutine_is_awaited_too():
    fx = run(functools.partial(async_handler), make_event("E"))
    assert len(fx) == 1


def test_returning_fx_is_accepted():
    assert len(run(chained, make_event("E"))) == 1


@pytest.mark.parametrize("handler, said", [(returns_number, "returned 42 (int)"),
                                           (returns_other_effects, "returned an Effects other than the fx it was given")])
def test_a_non_effects_return_value_is_a_clear_error_naming_the_handler(handler, said):
    with pytest.raises(HandlerResultError) as caught:
        run(handler, make_event("E"))
    assert handler.__qualname__ in str(caught.value) and said in str(caught.value)


def test_app_call_shares_the_path_async_and_result_check_included():
    app = App(require_schemas=False)
    app.add("test", "Async", async_handler)
    app.add("test", "Number", returns_number)
    fx = Effects()
    app(make_event("Async"), fx)
    assert len(fx) == 1
    with pytest.raises(HandlerResultError, match="returns_number returned 42"):
        app(make_event("Number"), Effects())


def test_run_from_inside_a_running_loop_still_finishes_the_handler():
    async def caller() -> Effects:
        return run(async_handler, make_event("E"))  # sync helper called by async test code

    assert len(asyncio.run(caller())) == 1


def _invoker(retries: int = 2) -> tuple[Invoker, list[int]]:
    retried: list[int] = []
    runner = asyncio.Runner()
    return Invoker(retries, Backoff(0.001, 0.002), runner, lambda _n, _e, _x, attempt: retried.append(attempt)), retried


def test_invoker_gives_effects_or_a_failure_never_an_exception():
    invoker, retried = _invoker()
    try:
        ok = invoker.call(chained, "chained", make_event("E"))
        assert isinstance(ok, Effects) and len(ok) == 1
        bad = invoker.call(returns_number, "tests.returns_number", make_event("E"))
        # permanent at once (no in-place retry: the same handler returns the same thing again)
        assert isinstance(bad, HandlerFailed) and bad.failure.kind == classes.PERMANENT
        assert bad.failure.error_class == "HandlerResultError" and "tests.returns_number returned 42" in bad.failure.error
        assert retried == []
    finally:
        invoker.runner.close()


def test_invoker_gathers_async_handlers_on_its_one_loop_and_retries_in_place():
    invoker, retried = _invoker(retries=1)
    loops: list[asyncio.AbstractEventLoop] = []
    calls = {"n": 0}

    async def remembers_loop(event, fx: Effects) -> None:
        loops.append(asyncio.get_running_loop())
        fx.sadd("{test:1}:s", event.id)

    async def fails_once(event, fx: Effects) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("first attempt")
        fx.sadd("{test:1}:s", event.id)

    async def always_fails(event, fx: Effects) -> None:
        raise RuntimeError("never works")

    try:
        jobs = [(remembers_loop, "remembers_loop", make_event("E"), ()) for _ in range(3)]
        jobs += [(fails_once, "fails_once", make_event("E"), ()), (always_fails, "always_fails", make_event("E"), ())]
        first = invoker.gather(jobs)
        second = invoker.gather(jobs[:1])
        assert [type(o).__name__ for o in first] == ["Effects"] * 4 + ["HandlerFailed"]
        assert first[4].failure.error_class == "HandlerError:RuntimeError" and first[4].failure.attempts == 2
        assert isinstance(second[0], Effects)
        assert len(set(map(id, loops))) == 1  # one loop across batches: cached clients stay usable
        assert sorted(retried) == [1, 1]
    finally:
        invoker.runner.close()


# -- exceptions outside Exception ---------------------------------------------------------------


def exits(event, fx: Effects) -> None:
    raise SystemExit(3)  # a library calling sys.exit() inside the handler


def cancelled_inside(event, fx: Effects) -> None:
    raise asyncio.CancelledError()  # e.g. a client library cancelling its own request


async def awaits_a_cancelled_task(event, fx: Effects) -> None:
    task = asyncio.get_running_loop().create_future()
    task.cancel()
    await task  # raises CancelledError in the handler; the consumer's task itself is not cancelled


def test_a_handler_raising_systemexit_fails_its_event_and_does_not_stop_the_consumer():
    """It escaped the invoker (``except Exception``): the loop died on that record at every restart."""
    invoker, retried = _invoker(retries=2)
    try:
        outcome = invoker.call(exits, "tests.exits", make_event("E"))
        assert isinstance(outcome, HandlerFailed) and outcome.failure.kind == classes.PERMANENT
        assert "SystemExit" in outcome.failure.error_class and "exit" in outcome.failure.error
        assert retried == []  # exiting again will not help: dead-lettered at once
    finally:
        invoker.runner.close()


@pytest.mark.parametrize("handler", [cancelled_inside, awaits_a_cancelled_task])
def test_a_cancellation_raised_by_the_handler_is_its_failure(handler):
    invoker, retried = _invoker(retries=1)
    try:
        outcome = invoker.call(handler, "tests.cancels", make_event("E"))
        assert isinstance(outcome, HandlerFailed) and outcome.failure.kind == classes.PERMANENT
        assert "CancelledError" in outcome.failure.error_class
        assert retried == [1]  # like any unclassified error: retried in place first
        gathered = invoker.gather([(awaits_a_cancelled_task, "c", make_event("E"), ()), (async_handler, "ok", make_event("E"), ())])
        assert isinstance(gathered[0], HandlerFailed) and isinstance(gathered[1], Effects)
    finally:
        invoker.runner.close()


def test_keyboard_interrupt_and_the_consumers_own_cancellation_still_stop_it():
    invoker, _ = _invoker(retries=1)

    def interrupted(event, fx: Effects) -> None:
        raise KeyboardInterrupt

    async def waits(event, fx: Effects) -> None:
        await asyncio.sleep(30)

    async def cancel_the_batch() -> None:
        job = asyncio.ensure_future(invoker._call_async(waits, "waits", make_event("E"), ()))
        await asyncio.sleep(0.01)
        job.cancel()  # the consumer stopping: the batch's task is cancelled from outside
        await job

    try:
        with pytest.raises(KeyboardInterrupt):
            invoker.call(interrupted, "interrupted", make_event("E"))
        with pytest.raises(asyncio.CancelledError):
            asyncio.run(cancel_the_batch())
    finally:
        invoker.runner.close()
