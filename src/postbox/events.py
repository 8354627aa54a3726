"""The event a consumer handler receives: one outbox row, as delivered through Kafka.

Shared by the consumer runtime (which builds it from a Kafka record: headers carry the id, event
type and creation time; the key is the aggregate id; the value is the decoded payload) and by
:mod:`postbox.testing` (which builds it directly, without Kafka).

``Event`` is generic in its payload so that a handler can say what it reads: ``Event`` alone (or
``Event[Any]``) carries the decoded mapping; ``Event[OrderPaid]`` carries an ``OrderPaid``
dataclass or TypedDict that the consumer builds from the mapping and checks against the event's
schema when the app starts (:mod:`postbox.payloads`). A parameter of the type, not a second
handler signature, so that untyped handlers keep working unchanged and mypy sees the payload's
fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    # A TypeVar default (PEP 696; in `typing` from Python 3.13): a bare `Event` means
    # Event[Mapping[str, Any]] to type checkers, so untyped handlers stay valid under mypy --strict.
    # Type checkers read typing_extensions from their own stubs: no runtime dependency for it.
    from typing_extensions import TypeVar as DefaultedTypeVar

    P = DefaultedTypeVar("P", default=Mapping[str, Any])
else:
    #: The payload's type: a mapping for untyped handlers, a payload class for typed ones.
    P = TypeVar("P")


@dataclass(frozen=True)
class Event(Generic[P]):
    """One event. ``id`` is the outbox row's UUID (the dedupe key); ``payload`` the decoded body
    (a ``Mapping[str, Any]`` unless the handler annotated ``Event[SomePayloadClass]``)."""

    id: str
    aggregate_type: str
    aggregate_id: str
    event_type: str
    payload: P = field(default_factory=dict)  # type: ignore[assignment]  # untyped events default to {}
    headers: Mapping[str, str] = field(default_factory=dict)
    topic: str | None = None
    partition: int | None = None
    offset: int | None = None
    created_at: datetime | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise ValueError(f"Event.id must be a non-empty str, got {self.id!r}")
