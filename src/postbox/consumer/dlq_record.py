"""One dead letter as a value: what is written to ``<topic>.dlq`` for one permanently failed record.

Pure functions over plain values (no Kafka client), so the two forms a dead letter can take are
unit-tested without a broker:

- **full** (:func:`full_letter`): the original key, value and headers unchanged, plus the
  ``postbox.*`` headers of the contract (error, class, origin topic/partition/offset, ...).
- **reference-only** (:func:`reference_letter`): for a record that does not fit the dead-letter
  topic (its ``max.message.bytes``). It keeps the contract's headers and the outbox router's
  small metadata headers (``id``, ``event_type``, ``aggregate_type``, ``created_at``,
  ``traceparent``), a key of at most :data:`MAX_REFERENCE_KEY_BYTES`, no value, and says so in
  ``postbox.reference-only`` (``true``) and ``postbox.original.bytes`` (the original's size). The
  original bytes stay where they were: ``postbox.origin.topic/partition/offset`` point at them for
  ``postbox dlq replay``, which reads them back from there (while the topic retains them).

Why a second form rather than a bigger limit: a record can be larger than any dead-letter topic
will take (another client wrote it, or the DLQ topic was made smaller by an operator); retrying it
forever would block its partition, so every failed record leaves it in a form that fits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from postbox.safe_text import safe_text
from postbox.topics import DLQ_SUFFIX

#: Every header postbox adds to a dead letter starts with this; replay strips them all.
DLQ_HEADER_PREFIX = "postbox."
H_ERROR = "postbox.error"
H_CLASS = "postbox.error.class"
H_KIND = "postbox.error.kind"
H_TOPIC = "postbox.origin.topic"
H_PARTITION = "postbox.origin.partition"
H_OFFSET = "postbox.origin.offset"
H_ATTEMPTS = "postbox.attempts"
H_GROUP = "postbox.group"
H_FAILED_AT = "postbox.failed_at"
#: Added by ``postbox dlq replay`` to the copy it sends back: names the dead letter (a copy sent on
#: purpose, which the group's failure verdict on the event does not bind).
REPLAY_OF_HEADER = "postbox.replay.of"
#: Every dead letter carries these.
DLQ_HEADERS = (H_ERROR, H_CLASS, H_KIND, H_TOPIC, H_PARTITION, H_OFFSET, H_ATTEMPTS, H_GROUP, H_FAILED_AT)
#: Only reference-only dead letters carry these: ``true``, and the original record's size in bytes.
H_REFERENCE_ONLY = "postbox.reference-only"
H_ORIGINAL_BYTES = "postbox.original.bytes"
MAX_ERROR_CHARS = 2000

#: Router headers a reference-only dead letter keeps (so `dlq list`/`trace` still find it).
REFERENCE_HEADERS = ("id", "event_type", "eventType", "aggregate_type", "created_at", "traceparent")
#: A kept header or key longer than this is dropped from a reference-only dead letter.
MAX_REFERENCE_KEY_BYTES = 1024
#: Per-record framing Kafka adds around key, value and headers (record batch header share,
#: varints, attributes); generous on purpose: the estimate decides which form is sent.
RECORD_OVERHEAD_BYTES = 512

Headers = list[tuple[str, "bytes | None"]]


@dataclass(frozen=True, slots=True)
class Failure:
    """Why one record is dead-lettered (``kind`` ``permanent``) or retried (``transient``)."""

    error_class: str
    error: str
    attempts: int = 1
    #: The engine's script already wrote the failure-stream record (effect failures).
    recorded: bool = False
    kind: str = "permanent"
    #: Its dead letter is acknowledged already, but its partition retries from a record before it
    #: (an earlier dead letter was not acknowledged): the retry finishes it without running it or
    #: sending it again (see Pipeline._owe_delivered).
    delivered: bool = False

    def __post_init__(self) -> None:
        # The error may quote the event's data: made writable as UTF-8 once, here (postbox.safe_text).
        object.__setattr__(self, "error", safe_text(str(self.error)))


def dlq_topic(origin: str) -> str:
    return origin + DLQ_SUFFIX


def one_line(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """``text`` on one line, at most ``limit`` characters, writable as UTF-8."""
    flat = " ".join(safe_text(str(text)).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def dlq_headers(
    original: Sequence[tuple[str, bytes | None]] | None,
    failure: Failure,
    *,
    topic: str,
    partition: int,
    offset: int,
    group: str,
    failed_at: datetime | None = None,
) -> Headers:
    """The DLQ record's headers: the original ones (ours replaced), then the ``postbox.*`` ones."""
    when = (failed_at or datetime.now(timezone.utc)).astimezone(timezone.utc)
    ours = {
        H_ERROR: one_line(failure.error),
        H_CLASS: failure.error_class,
        H_KIND: failure.kind,
        H_TOPIC: topic,
        H_PARTITION: str(partition),
        H_OFFSET: str(offset),
        H_ATTEMPTS: str(failure.attempts),
        H_GROUP: group,
        H_FAILED_AT: when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
    }
    drop = set(ours) | {H_REFERENCE_ONLY, H_ORIGINAL_BYTES}
    kept = [(k, v) for k, v in (original or []) if k not in drop]
    return kept + [(k, v.encode("utf-8")) for k, v in ours.items()]


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a failed record was read and what it carried (the fields of a Kafka message)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, "bytes | None"]]

    @classmethod
    def of(cls, msg) -> "Origin":  # noqa: ANN001 - a confluent_kafka.Message (C type)
        return cls(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(), list(msg.headers() or []))

    @property
    def size(self) -> int:
        """Bytes of key, value and headers (what a full dead letter repeats)."""
        return _len(self.key) + _len(self.value) + _headers_len(self.headers)

    @property
    def where(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}"


@dataclass(frozen=True, slots=True)
class DeadLetterRecord:
    """A record ready to produce to its dead-letter topic."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: Headers
    reference_only: bool = False

    @property
    def size(self) -> int:
        """An upper estimate of its size as Kafka counts it against ``max.message.bytes``."""
        return _len(self.key) + _len(self.value) + _headers_len(self.headers) + RECORD_OVERHEAD_BYTES


def full_letter(origin: Origin, failure: Failure, *, group: str, failed_at: datetime) -> DeadLetterRecord:
    """The original key, value and headers plus the ``postbox.*`` ones."""
    headers = dlq_headers(origin.headers, failure, topic=origin.topic, partition=origin.partition,
                          offset=origin.offset, group=group, failed_at=failed_at)
    return DeadLetterRecord(dlq_topic(origin.topic), origin.key, origin.value, headers)


def reference_letter(origin: Origin, failure: Failure, *, group: str, failed_at: datetime, limit: int | None = None) -> DeadLetterRecord:
    """Metadata, the error and where the original is; no value. ``limit``: the topic's
    ``max.message.bytes`` the full form exceeded (named in the error, for the operator)."""
    kept = [(k, v) for k, v in origin.headers if k in REFERENCE_HEADERS and _len(v) <= MAX_REFERENCE_KEY_BYTES]
    key = origin.key if _len(origin.key) <= MAX_REFERENCE_KEY_BYTES else None
    too_big = f"more than the {limit:,} bytes {dlq_topic(origin.topic)} accepts" if limit else f"too large for {dlq_topic(origin.topic)}"
    note = (f" [reference-only dead letter: the original record ({origin.size:,} bytes, {too_big}) stays at"
            f" {origin.where}; `postbox dlq replay` reads it from there]")
    annotated = Failure(failure.error_class, _clip(failure.error, len(note)) + note, failure.attempts, failure.recorded, failure.kind)
    headers = dlq_headers(kept, annotated, topic=origin.topic, partition=origin.partition, offset=origin.offset,
                          group=group, failed_at=failed_at)
    headers += [(H_REFERENCE_ONLY, b"true"), (H_ORIGINAL_BYTES, str(origin.size).encode())]
    return DeadLetterRecord(dlq_topic(origin.topic), key, None, headers, reference_only=True)


def letter_for(origin: Origin, failure: Failure, *, group: str, limit: int, failed_at: datetime | None = None) -> DeadLetterRecord:
    """The full form when it fits ``limit`` (the DLQ topic's ``max.message.bytes``), else the
    reference-only form."""
    when = failed_at or datetime.now(timezone.utc)
    letter = full_letter(origin, failure, group=group, failed_at=when)
    if letter.size <= limit:
        return letter
    return reference_letter(origin, failure, group=group, failed_at=when, limit=limit)


def _clip(text: str, room: int, limit: int = MAX_ERROR_CHARS) -> str:
    keep = max(100, limit - room)
    return text if len(text) <= keep else text[: keep - 3] + "..."


def _len(raw: bytes | str | None) -> int:
    if raw is None:
        return 0
    return len(raw.encode("utf-8")) if isinstance(raw, str) else len(raw)


def _headers_len(headers: Sequence[tuple[str, "bytes | str | None"]]) -> int:
    return sum(len(k.encode("utf-8")) + _len(v) + 4 for k, v in headers)
