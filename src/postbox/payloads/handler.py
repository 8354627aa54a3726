"""Handlers that ask for a typed payload: ``def on_paid(event: Event[OrderPaid], fx: Effects)``.

The payload class is the type argument of the handler's first parameter, so the handler API stays
``handler(event, fx)`` and mypy sees ``event.payload.amount_cents`` as an ``int``. (FastStream reads
the message type from the annotation of the handler's argument in the same spirit; postbox keeps
the event's metadata beside the payload, hence ``Event[...]`` rather than a bare payload argument.)

:class:`App` registers such a handler wrapped in a :class:`TypedHandler`: calling it builds the
payload class from the decoded mapping (:mod:`postbox.payloads.build`) and calls the function with
an ``Event`` carrying the instance. Every caller of handlers (the runtime, ``App.__call__``, the
test harness) therefore gets typed payloads without knowing about them. The annotation is resolved
lazily (at the start-up check or the first call): a payload class defined below its handler in the
module is fine.
"""

from __future__ import annotations

import copy
import functools
import inspect
import re
import typing
from typing import Any

from postbox.errors import HandlerRegistrationError, PayloadTypeError
from postbox.events import Event
from postbox.payloads.build import PayloadBuilder
from postbox.payloads.shape import MAPPING_ORIGINS, is_open, is_payload_class, name_of

_TYPED_TEXT = re.compile(r"\bEvent\s*\[")


def wants_typed_payload(func: Any) -> bool:
    """True when ``func``'s first parameter is annotated ``Event[Something]`` (as text or object)."""
    raw = _first_parameter(func)
    if raw is None or raw.annotation is inspect.Parameter.empty:
        return False
    annotation = raw.annotation
    if isinstance(annotation, str):
        return bool(_TYPED_TEXT.search(annotation))
    return typing.get_origin(annotation) is Event


class TypedHandler:
    """Calls ``func(event_with_built_payload, fx)``; ``payload_class`` is None for ``Event[Any]``/``Event[Mapping...]``."""

    def __init__(self, func: Any) -> None:
        functools.update_wrapper(self, func)
        self.func = func
        self._resolved = False
        self._class: type | None = None
        self._builder: PayloadBuilder | None = None

    @property
    def payload_class(self) -> type | None:
        """The class the payload is built as; HandlerRegistrationError when the annotation cannot be read."""
        if not self._resolved:
            self._class = payload_class_of(self.func)
            self._builder = PayloadBuilder(self._class) if self._class is not None else None
            self._resolved = True
        return self._class

    def typed(self, event: Event[Any]) -> Event[Any]:
        """``event`` with its payload built as the handler's class (PayloadTypeError names the misfit)."""
        if self.payload_class is None or self._builder is None:
            return event
        try:
            payload = self._builder(event.payload)
        except PayloadTypeError as exc:
            label = f"{event.aggregate_type}/{event.event_type} payload of event {event.id} (handler {_name(self.func)})"
            raise PayloadTypeError(label + exc.message[len("payload"):], field=exc.field) from None
        # A shallow copy with the payload swapped: dataclasses.replace re-runs __init__ field by
        # field, several times the cost of the build itself, once per event on the hot path.
        built = copy.copy(event)
        object.__setattr__(built, "payload", payload)
        return built

    def __call__(self, event: Event[Any], fx: Any) -> Any:
        return self.func(self.typed(event), fx)


class AsyncTypedHandler(TypedHandler):
    """The ``async def`` form: awaited by the runtime like any async handler."""

    async def __call__(self, event: Event[Any], fx: Any) -> Any:
        return await self.func(self.typed(event), fx)


def typed(func: Any) -> TypedHandler:
    """Wrap a handler annotated ``Event[...]`` (sync or async)."""
    target = func if inspect.isfunction(func) or inspect.ismethod(func) else type(func).__call__
    is_async = inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(target)
    return AsyncTypedHandler(func) if is_async else TypedHandler(func)


def payload_class_of(func: Any) -> type | None:
    """The ``P`` of the first parameter's ``Event[P]``; None for ``Event[Any]`` and mapping payloads."""
    param = _first_parameter(func)
    assert param is not None
    target = func if inspect.isfunction(func) or inspect.ismethod(func) else type(func).__call__
    try:
        hint = typing.get_type_hints(target).get(param.name, param.annotation)
    except Exception as exc:  # NameError for a class the handler's module does not define or import
        raise HandlerRegistrationError(
            f"handler {_name(func)}: cannot resolve the annotation {param.annotation!r} of its {param.name!r} parameter: {exc}",
            fix="define or import the payload class at module level of the handler's module (annotations are resolved there)",
        ) from None
    args = typing.get_args(hint)
    payload = args[0] if typing.get_origin(hint) is Event and args else Any
    if is_open(payload) or payload in MAPPING_ORIGINS or typing.get_origin(payload) in MAPPING_ORIGINS:
        return None
    if not is_payload_class(payload):
        raise HandlerRegistrationError(
            f"handler {_name(func)}: Event[{name_of(payload)}] — a payload is read as a dataclass or a TypedDict",
            fix="annotate Event[YourDataclass] (`postbox schemas codegen` writes them from schemas/) or plain Event for a mapping",
        )
    return payload


def _first_parameter(func: Any) -> inspect.Parameter | None:
    try:
        params = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):
        return None
    return params[0] if params else None


def _name(func: Any) -> str:
    return getattr(func, "__qualname__", None) or repr(func)


__all__ = ["AsyncTypedHandler", "TypedHandler", "payload_class_of", "typed", "wants_typed_payload"]
