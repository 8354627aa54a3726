"""Start-up and shutdown hooks of an :class:`~postbox.consumer.App`, and the resources they make.

A handler that talks to a database needs a connection pool opened once per process and closed
when the process stops, not a global opened on first use and never closed::

    @app.on_startup
    def db() -> ConnectionPool:                      # the resource "db": the hook's return value
        return ConnectionPool(os.environ["SHOP_DATABASE_URL"])

    @app.on_shutdown
    def close_db(db: ConnectionPool) -> None:        # runs only if "db" was made
        db.close()

    @app.handler("order", "OrderPlaced")
    def charge(event: Event, fx: Effects, db: ConnectionPool) -> None: ...

Resources are passed **by parameter name**: a required parameter of a handler (after ``event, fx``), of a
start-up hook or of a shutdown hook names the start-up hook that makes it. A name no start-up hook
makes is refused when the app starts (:class:`~postbox.errors.ConfigError`, naming the function
and the parameter), not at the first event.

Order: start-up hooks run once, in registration order (a hook may take the resources of the
hooks before it); shutdown hooks run once, in reverse registration order, each only when every
resource it takes was made — so when a start-up hook fails midway, what was opened before it is
closed and nothing else. A failing start-up hook is a configuration error naming the hook and its
error (``postbox consume`` exits 1); a failing shutdown hook is logged and the others still run.

Hooks are synchronous: they run before the consumer's event loop exists and after it is closed.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from postbox.errors import ConfigError, HandlerRegistrationError

log = logging.getLogger("postbox.consumer.lifecycle")

#: The two parameters every handler takes before its resources.
HANDLER_PARAMS = 2


@dataclass(frozen=True)
class Hook:
    """One start-up or shutdown function and the resources (parameter names) it takes."""

    func: Callable[..., Any]
    needs: tuple[str, ...]

    @property
    def name(self) -> str:
        return getattr(self.func, "__name__", repr(self.func))

    def call(self, resources: Mapping[str, Any]) -> Any:
        return self.func(**{n: resources[n] for n in self.needs})


def resource_params(func: Callable[..., Any], *, skip: int, what: str) -> tuple[str, ...]:
    """The names of ``func``'s parameters after the first ``skip``: the resources it takes.

    ``*args``/``**kwargs`` and positional-only extras cannot name a resource: refused here, at
    registration, with the function's name."""
    try:
        params = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):
        return ()  # builtins and some C callables: no resources
    extra = params[skip:]
    names: list[str] = []
    for param in extra:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD) or param.default is not param.empty:
            continue  # a parameter with a default keeps it: only required ones name resources
        if param.kind is param.POSITIONAL_ONLY:
            raise HandlerRegistrationError(
                f"{what} {_name(func)}: parameter {param.name!r} is positional-only; resources are passed by name",
                fix="remove the '/' so the resource can be passed as a keyword",
            )
        names.append(param.name)
    return tuple(names)


class Lifecycle:
    """The hooks of one app and, while it runs, the resources they made."""

    def __init__(self) -> None:
        self.startup: list[Hook] = []
        self.shutdown: list[Hook] = []
        self._resources: dict[str, Any] = {}
        self._running = False

    # -- registration ---------------------------------------------------------------------------

    def add_startup(self, func: Callable[..., Any]) -> None:
        self.startup.append(_hook(func, "start-up hook"))

    def add_shutdown(self, func: Callable[..., Any]) -> None:
        self.shutdown.append(_hook(func, "shutdown hook"))

    @property
    def provided(self) -> tuple[str, ...]:
        """The resource names the start-up hooks make (each hook's function name)."""
        return tuple(h.name for h in self.startup)

    def check(self, users: Mapping[str, tuple[str, ...]]) -> None:
        """Refuse a parameter that names no start-up hook (``users``: function name → its
        resource parameters), or a start-up hook taking a resource made after it."""
        provided = self.provided
        for index, hook in enumerate(self.startup):
            for need in hook.needs:
                if need not in provided[:index]:
                    raise ConfigError(
                        f"start-up hook {hook.name} takes {need!r}, which no earlier start-up hook makes"
                        f" (hooks in order: {', '.join(provided) or 'none'})",
                        fix="register the hook that makes it first, or rename the parameter to an earlier hook's name",
                    )
        for who, needs in list(users.items()) + [(f"shutdown hook {h.name}", h.needs) for h in self.shutdown]:
            for need in needs:
                if need not in provided:
                    raise ConfigError(
                        f"{who} takes a parameter {need!r}, but no start-up hook makes a resource of that name"
                        f" (resources: {', '.join(provided) or 'none'})",
                        fix=f"add `@app.on_startup def {need}(): return ...`, or remove the parameter",
                    )

    # -- running ----------------------------------------------------------------------------------

    @property
    def resources(self) -> Mapping[str, Any]:
        """The resources made so far (read-only view)."""
        return dict(self._resources)

    def resource(self, name: str, user: str) -> Any:
        """The resource ``name`` for ``user`` (a handler); a clear error when the app is not started."""
        try:
            return self._resources[name]
        except KeyError:
            raise ConfigError(
                f"{user} takes the resource {name!r}, but the app's start-up hooks have not run",
                fix="run the app with `postbox consume`, or inside `with app.started():` in tests and scripts",
            ) from None

    def start(self) -> None:
        """Run the start-up hooks in order; on a failure, close what was opened and raise
        :class:`ConfigError` naming the hook. Idempotent while running."""
        if self._running:
            return
        self._running = True
        for hook in self.startup:
            try:
                value = hook.call(self._resources)
            except Exception as exc:  # noqa: BLE001 - any error of user code: named, then re-raised as ConfigError
                self.stop()
                raise ConfigError(
                    f"start-up hook {hook.name} failed: {type(exc).__name__}: {exc}",
                    fix="fix what the hook opens (its URL, credentials, the service it needs) and start again",
                ) from exc
            if inspect.isawaitable(value):
                _close_awaitable(value)
                self.stop()
                raise ConfigError(f"start-up hook {hook.name} returned an awaitable: hooks are synchronous",
                                  fix="define it with `def`, not `async def`")  # fmt: skip
            self._resources[hook.name] = value
            log.info("start-up hook ran: %s", hook.name)

    def stop(self) -> None:
        """Run the shutdown hooks whose resources were made, in reverse order; forget the
        resources. A failing hook is logged and the others still run. Idempotent."""
        if not self._running:
            return
        for hook in reversed(self.shutdown):
            if not all(n in self._resources for n in hook.needs):
                continue
            try:
                hook.call(self._resources)
                log.info("shutdown hook ran: %s", hook.name)
            except Exception:  # noqa: BLE001 - one failing hook must not keep the others from closing
                log.exception("shutdown hook %s failed", hook.name)
        self._resources.clear()
        self._running = False

    @contextmanager
    def running(self) -> Iterator[Mapping[str, Any]]:
        """Start-up hooks on entry, shutdown hooks on exit (also on an exception)."""
        self.start()
        try:
            yield self.resources
        finally:
            self.stop()


def _hook(func: Callable[..., Any], what: str) -> Hook:
    if not callable(func):
        raise HandlerRegistrationError(f"{what} {func!r} is not callable")
    if inspect.iscoroutinefunction(func):
        raise HandlerRegistrationError(f"{what} {_name(func)} is async: hooks are synchronous (they run outside the event loop)",
                                       fix="define it with `def`")  # fmt: skip
    return Hook(func, resource_params(func, skip=0, what=what))


def _close_awaitable(value: Any) -> None:
    close = getattr(value, "close", None)
    if callable(close):
        close()  # a coroutine never awaited: close it so Python does not warn


def _name(func: Any) -> str:
    return getattr(func, "__qualname__", None) or repr(func)
