"""The event a consumer handler receives: one outbox row, as delivered through Kafka.

Shared by the consumer runtime (which builds it from a Kafka record: headers carry the id, event
type and creation time; the key is the aggregate id; the value is the decoded payload) and by
:mod:`postbox.testing` (which builds it directly, without Kafka).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Mapping


@dataclass(frozen=True)
class Event:
    """One event. ``id`` is the outbox row's UUID (the dedupe key); ``payload`` the decoded body."""

    id: str
    aggregate_type: str
    aggregate_id: str
    event_type: str
    payload: Mapping[str, Any] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    topic: str | None = None
    partition: int | None = None
    offset: int | None = None
    created_at: datetime | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise ValueError(f"Event.id must be a non-empty str, got {self.id!r}")
