"""Running a handler: ``handler(event, fx) → Effects | HandlerFailed`` — the ONE path shared by the
runtime, :meth:`App.__call__ <postbox.consumer.App.__call__>` and :mod:`postbox.testing`.

Why one path: each caller used to run handlers its own way, and they drifted — the test harness
called an ``async def`` handler, got a coroutine back, ignored it, and reported the event APPLIED
with no effects (only a ``RuntimeWarning`` said why). Here:

- :func:`start` calls the handler once with a fresh (or given) :class:`~postbox.effects.Effects`.
  A sync handler is finished when it returns; an ``async def`` handler (or a sync callable that
  returns an awaitable, e.g. a ``functools.partial`` of one) hands back the awaitable that finishes
  it. Either way the return value is checked: a handler returns ``None`` (or the ``fx`` it was
  given, as chained ``fx.hset(...)`` calls do); anything else is a
  :class:`HandlerResultError` naming the handler and what it returned, because those effects would
  otherwise be silently lost.
- :func:`run` finishes one handler call synchronously, awaiting an async handler on the caller's
  :class:`asyncio.Runner` (the harness owns one for its lifetime) or a fresh loop.
- :class:`Invoker` is the runtime's form: in-place retries and the verdict table of
  :mod:`postbox.consumer.handler_errors`, ``Effects`` or a :class:`HandlerFailed` per event, never an
  exception. Async handlers run on ONE event loop the consumer owns for its lifetime (an
  ``asyncio.Runner``), so clients a handler caches stay bound to a live loop; the async handlers of
  one batch are gathered (they run concurrently), sync ones run in offset order.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from postbox import failure_classes as classes
from postbox.consumer.backoff import Backoff
from postbox.consumer import tracing
from postbox.consumer.dlq_record import Failure, one_line
from postbox.consumer.event_scope import event_scope
from postbox.consumer.handler_errors import Verdict, classify
from postbox.consumer.logs import bind_event, unbind_event
from postbox.effects import Effects
from postbox.errors import InvalidEffectError
from postbox.events import Event

T = TypeVar("T")
Handler = Callable[[Event, Effects], Any]


class HandlerResultError(InvalidEffectError):
    """A handler returned something other than ``None`` or the ``fx`` it was given (permanent: the
    same handler returns the same kind of value on every retry)."""


@dataclass(frozen=True, slots=True)
class HandlerFailed:
    """A handler's failure as the runtime records it: its verdict (``failure.kind`` permanent or
    transient) and, for a permanent one, the exception whose traceback goes into the log."""

    failure: Failure
    exc: BaseException | None = None


Outcome = Effects | HandlerFailed
#: One handler call for :meth:`Invoker.gather`: (handler, its name, the event, its declared transient errors).
Job = tuple[Handler, str, Event, tuple[type[BaseException], ...]]


def handler_name(handler: Any) -> str:
    """The name errors and logs show for ``handler``: its qualified name, else its repr."""
    module = getattr(handler, "__module__", None)
    qualname = getattr(handler, "__qualname__", None)
    if qualname is None:
        return repr(handler)
    return f"{module}.{qualname}" if module and module != "__main__" else qualname


def check_result(result: object, name: str, fx: Effects) -> None:
    """Refuse a handler's return value other than ``None`` or ``fx`` (see the module docs)."""
    if result is None or result is fx:
        return
    if isinstance(result, Effects):
        what = "an Effects other than the fx it was given (its commands would be lost)"
    else:
        shown = repr(result)
        what = f"{shown if len(shown) <= 80 else shown[:77] + '...'} ({type(result).__name__})"
    raise HandlerResultError(
        f"handler {name} returned {what}",
        fix="describe the changes on the fx the handler is given (fx.hset(...), ...) and return None",
    )


def start(handler: Handler, event: Event, fx: Effects, name: str | None = None) -> Coroutine[Any, Any, None] | None:
    """Call ``handler(event, fx)`` once. None when it is finished (a sync handler); otherwise the
    coroutine that finishes it (await it, or hand it to :func:`run_awaitable`). The handler's own
    exceptions propagate; a wrong return value raises :class:`HandlerResultError`."""
    result = handler(event, fx)
    if result is None:  # the common case, first: this runs once per event
        return None
    return returned(result, handler, fx, name)


def returned(result: object, handler: Handler, fx: Effects, name: str | None = None) -> Coroutine[Any, Any, None] | None:
    """:func:`start` once the handler returned ``result`` (not None): the coroutine that finishes
    an awaitable, else None once the value is checked (:func:`check_result`)."""
    if inspect.isawaitable(result):
        return _finish(result, name or handler_name(handler), fx)
    check_result(result, name or handler_name(handler), fx)
    return None


async def _finish(awaitable: Awaitable[Any], name: str, fx: Effects) -> None:
    check_result(await awaitable, name, fx)


def run_awaitable(coroutine: Coroutine[Any, Any, T], runner: asyncio.Runner | None = None) -> T:
    """Run ``coroutine`` to completion from sync code: on ``runner``'s loop (kept across calls),
    else on a fresh loop. Called from inside a running loop (a sync helper used by async test code),
    it runs on a loop of its own in a short-lived thread: the caller's loop cannot be re-entered."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return runner.run(coroutine) if runner is not None else asyncio.run(coroutine)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coroutine)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="postbox-handler-loop")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return cast(T, box["value"])


def run(handler: Handler, event: Event, fx: Effects | None = None, *, name: str | None = None,
        runner: asyncio.Runner | None = None) -> Effects:
    """Run ``handler`` once to completion (async included) and return the effects it described.
    Exceptions propagate unchanged: the form for tests and scripts."""
    fx = Effects() if fx is None else fx
    pending = start(handler, event, fx, name)
    if pending is not None:
        run_awaitable(pending, runner)
    return fx


#: Called before a handler is retried in place: (handler name, event, exception, attempt).
OnRetry = Callable[[str, Event, BaseException, int], None]


@dataclass
class Invoker:
    """The runtime's way of running handlers (see the module docs). ``retries``: in-place retries
    of an error the verdict table does not settle (``handler_retries``), each attempt with a fresh
    ``Effects`` after a short jittered pause; ``runner``: the consumer's event loop; ``group``: the
    consumer group the event spans name.

    Around each event's attempts the event is bound to the log context (its retry lines and the
    handler's own lines belong to the event) and, when OpenTelemetry is configured, its span is
    entered (:func:`~postbox.consumer.event_scope.event_scope`); an async handler gets both in its
    own task. Without tracing a sync handler costs one ContextVar set/reset around the call, no
    per-event wrapper object (this runs once per event)."""

    retries: int
    backoff: Backoff
    runner: asyncio.Runner
    on_retry: OnRetry | None = None
    group: str | None = None

    def call(self, handler: Handler, name: str, event: Event, transient: tuple[type[BaseException], ...] = ()) -> Outcome:
        """Run one handler (a sync one; an async one is awaited on the consumer's loop)."""
        return self.caller()(handler, name, event, transient)

    def caller(self) -> "Callable[[Handler, str, Event, tuple[type[BaseException], ...]], Outcome]":
        """:meth:`call` for the events of one batch: whether tracing is on is asked once (per
        event it cost a call and a clock read), not per event."""
        return self._call_traced if tracing.enabled() else self._call_bound

    def _call_traced(self, handler: Handler, name: str, event: Event, transient: tuple[type[BaseException], ...]) -> Outcome:
        with event_scope(event, self.group):
            return self._call(handler, name, event, transient)

    def _call_bound(self, handler: Handler, name: str, event: Event, transient: tuple[type[BaseException], ...]) -> Outcome:
        token = bind_event(event)
        try:
            return self._call(handler, name, event, transient)
        finally:
            unbind_event(token)

    def _call(self, handler: Handler, name: str, event: Event, transient: tuple[type[BaseException], ...]) -> Outcome:
        attempt = 0
        while True:
            attempt += 1
            fx = Effects()
            try:
                result = handler(event, fx)  # start(), inline: this runs once per event
                if result is not None:
                    pending = returned(result, handler, fx, name)
                    if pending is not None:
                        self.runner.run(pending)
                return fx
            except BaseException as exc:  # noqa: BLE001 - every handler error is classified
                if not raised_by_handler(exc):
                    raise
                failed = self._failed(name, event, exc, attempt, transient)
                if failed is not None:
                    return failed
            time.sleep(self.backoff.delay(attempt) / 4)

    def gather(self, jobs: Sequence[Job]) -> list[Outcome]:
        """Run async handlers concurrently on the consumer's loop; outcomes in the order of ``jobs``."""

        async def all_of() -> list[Outcome]:
            return list(await asyncio.gather(*(self._call_async_scoped(*job) for job in jobs)))

        return self.runner.run(all_of())

    async def _call_async_scoped(self, handler: Handler, name: str, event: Event,
                                 transient: tuple[type[BaseException], ...]) -> Outcome:
        with event_scope(event, self.group):  # in this job's own task: its context is the task's copy
            return await self._call_async(handler, name, event, transient)

    async def _call_async(self, handler: Handler, name: str, event: Event, transient: tuple[type[BaseException], ...]) -> Outcome:
        attempt = 0
        while True:
            attempt += 1
            fx = Effects()
            try:
                pending = start(handler, event, fx, name)
                if pending is not None:
                    await pending
                return fx
            except BaseException as exc:  # noqa: BLE001
                if not raised_by_handler(exc):
                    raise
                failed = self._failed(name, event, exc, attempt, transient)
                if failed is not None:
                    return failed
            await asyncio.sleep(self.backoff.delay(attempt) / 4)

    def _failed(self, name: str, event: Event, exc: BaseException, attempt: int,
                transient: tuple[type[BaseException], ...]) -> HandlerFailed | None:
        """The verdict on attempt ``attempt``'s exception: None to retry in place."""
        verdict = classify(exc, transient)
        said = _said(exc)
        text = f"{type(exc).__name__}: {said}"
        if verdict is Verdict.TRANSIENT:
            return HandlerFailed(Failure(classes.transient(type(exc).__name__), f"{name} raised {text}", attempt, kind=classes.TRANSIENT))
        if verdict is Verdict.PERMANENT:
            return HandlerFailed(Failure(classes.handler_refused(exc), f"{name}: {said}", attempt), exc)
        if attempt <= self.retries:
            if self.on_retry is not None:
                self.on_retry(name, event, exc, attempt)
            return None
        return HandlerFailed(Failure(classes.handler_gave_up(exc), f"{name} raised {text} (after {attempt} attempt(s))", attempt), exc)


def raised_by_handler(exc: BaseException) -> bool:
    """Whether ``exc`` is the handler's failure (its event's verdict), not the consumer stopping.

    Any ``Exception``; ``SystemExit`` (a library calling ``sys.exit()`` inside the handler: one
    record must not end the process at every restart); a ``CancelledError`` the handler's own
    code raised (a client cancelling its request). Not: ``KeyboardInterrupt``, and a cancellation
    of the consumer's own task (``Task.cancelling()``: the batch is being stopped from outside)."""
    if isinstance(exc, (Exception, SystemExit)):
        return True
    if isinstance(exc, asyncio.CancelledError):
        try:
            task = asyncio.current_task()
        except RuntimeError:  # no running loop: a sync handler raised it
            return True
        return task is None or task.cancelling() == 0
    return False


def _said(exc: BaseException) -> str:
    """What the failure says of ``exc`` (one line; an exit names what it did)."""
    if isinstance(exc, SystemExit):
        return f"exited (SystemExit({exc.code!r})): a handler must not end the consumer's process"
    return one_line(str(exc))


__all__ = ["HandlerFailed", "HandlerResultError", "Invoker", "Job", "Outcome", "check_result", "handler_name", "raised_by_handler", "run", "run_awaitable", "start"]
