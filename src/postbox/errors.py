"""Exception types shared by the whole library.

Every error a user can cause or meet carries a message that names what was wrong and where,
and (when there is one) the fix, so the CLI can print it as one line without a traceback.
"""

from __future__ import annotations


class PostboxError(Exception):
    """Base class for expected failures: the CLI prints these without a traceback."""

    def __init__(self, message: str, *, fix: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix

    def __str__(self) -> str:
        if self.fix:
            return f"{self.message}\n  fix: {self.fix}"
        return self.message


class ConfigError(PostboxError):
    """A setting (environment variable, flag or file) has a value postbox cannot use."""


class StackError(PostboxError):
    """The local stack could not be brought up, inspected or stopped."""


class ConnectError(PostboxError):
    """Kafka Connect's REST API refused a request or is unreachable."""


class SchemaError(PostboxError):
    """An Avro schema file cannot be used: it does not parse, or it is misplaced or misnamed."""


class UnknownEventError(SchemaError):
    """No schema is registered for an (aggregate type, event type, version) or a fingerprint."""


class PayloadError(PostboxError):
    """A payload does not fit its event's schema.

    Carries the event type, the dotted path of the offending field and the value, so callers
    (and logs) can say exactly what was wrong without re-deriving it from the message.
    """

    def __init__(
        self,
        message: str,
        *,
        event_type: str,
        field: str | None = None,
        value: object = None,
        fix: str | None = None,
    ) -> None:
        super().__init__(message, fix=fix)
        self.event_type = event_type
        self.field = field
        self.value = value


class DecodeError(PostboxError):
    """Bytes read from a topic cannot be turned into a payload (a permanent failure: dead-letter it)."""


class UnknownEventTypeError(DecodeError):
    """An Avro record of an event type this consumer has no schema for at all (its writer schema's
    fingerprint is unknown and so is the type its ``event_type`` header names). Dead-lettered as
    ``UnknownEventType``, like an event no handler takes: the bytes may be fine, this deployment
    lacks the type. An unknown fingerprint of a known type stays a plain :class:`DecodeError`."""


class PayloadTypeError(DecodeError):
    """A payload cannot be built as the class its handler annotated (``Event[OrderPaid]``): a field
    is missing or of another type. Permanent, like any payload that does not decode: the schema
    check at start-up makes it rare (events with no schema, hand-made test events)."""

    def __init__(self, message: str, *, field: str | None = None, fix: str | None = None) -> None:
        super().__init__(message, fix=fix)
        self.field = field


class OutboxError(PostboxError):
    """The outbox table cannot be written: it is missing, or the role lacks a privilege."""


class NoTransactionError(OutboxError):
    """``emit`` was called where the event would commit alone (an autocommit connection outside
    a transaction block): refused before any SQL, so nothing is written."""


class ConnectionTypeError(PostboxError, TypeError):
    """The writer was handed something it cannot send an event on in the caller's transaction
    (another driver, SQLite, a pool, an engine, the asyncio kind for the sync writer or the other
    way round): refused before any SQL, naming what it got and how to get to a supported
    connection. A ``TypeError``, as for any argument of the wrong type."""


class SharedConnectionError(OutboxError):
    """An emit (or ``transaction()``) on a connection that an ``outbox.transaction()`` block of
    another thread or asyncio task holds: refused before any SQL, so nothing is written."""


class RetentionError(PostboxError):
    """Outbox retention (partition maintenance or cleanup) could not run."""


class EffectError(PostboxError):
    """Base class of the Redis effects engine's errors (`postbox.effects`)."""


class InvalidEffectError(EffectError, ValueError):
    """A handler described an effect postbox cannot send: wrong value type, bad option mix, too big.

    Raised by the `Effects` builder while the handler runs, so the traceback points at the handler
    line. The event can never succeed as described: treat it as permanent (dead-letter it).
    """


class PermanentEffectError(EffectError):
    """An event's effects failed deterministically (WRONGTYPE, a user function's error, mixed slots).

    Nothing of the event stayed in Redis (the script undid it) and retrying gives the same answer:
    the runtime dead-letters the event and moves on. ``result`` is the event's `ApplyResult`.
    """

    def __init__(self, message: str, *, fix: str | None = None, result: object = None) -> None:
        super().__init__(message, fix=fix)
        self.result = result


class CrossSlotEffectError(PermanentEffectError):
    """The keys of one event's effects live in different Redis Cluster hash slots."""


class TransientEffectError(EffectError):
    """Redis refused or could not be asked: connection lost, timeout, OOM, BUSY, LOADING, TRYAGAIN,
    CLUSTERDOWN, READONLY/MASTERDOWN (failover), NOSCRIPT after reloading, WAITAOF not confirmed.

    Retrying the same batch is always safe: a refused call ran nothing, and an event whose call did
    run (a lost reply) comes back as a duplicate. Retry with backoff; never skip, never commit past.
    ``reason`` is a short tag (``"OOM"``, ``"connection"``, ...) for metrics and logs.
    """

    def __init__(self, message: str, *, reason: str, fix: str | None = None) -> None:
        super().__init__(message, fix=fix)
        self.reason = reason


class EffectEngineError(EffectError):
    """The engine or its script is broken or misused (an unexpected error reply, an undo that failed,
    a user effect function that does not compile). Neither retrying nor skipping is right: stop the
    consumer and look. The message names what failed."""


class EffectConfigError(EffectEngineError):
    """Redis or the deployment refuses what the effects need, the same for every event: an ACL
    refusal (a command or key the consumer's Redis user may not use, inside the apply script or a
    user Lua function), a command scripts may not run, a user effect function whose file is missing.

    Dead-lettering would move every event of the stream to the DLQ for nothing, so the consumer
    stops instead (exit code 3): nothing of the batch is committed or dead-lettered, and the
    message names the refusal and the fix. After the fix, the records are simply consumed again.
    """


class TraceContextError(PostboxError):
    """A W3C traceparent value is malformed."""


class IncidentError(PostboxError):
    """Base class of the incident commands' expected failures (`postbox topics`, `trace`, `dlq`, ...)."""


class KafkaUnavailableError(IncidentError):
    """The Kafka brokers cannot be reached (or did not answer in time)."""


class UnknownTopicError(IncidentError):
    """A command named a topic that does not exist on the cluster."""


class UnknownGroupError(IncidentError):
    """A command named a consumer group that has no committed offsets and no members."""


class GroupActiveError(IncidentError):
    """An offset reset was refused because the consumer group still has members."""


class UnsafeReplayError(IncidentError):
    """A replay was refused: it could apply an event twice (dedupe marker may have expired) or skip events."""


class AuditError(IncidentError):
    """An audit record could not be written or read."""


class ConsumerError(PostboxError):
    """Base class of the consumer runtime's errors (`postbox.consumer`)."""


class HandlerRegistrationError(ConsumerError, ValueError):
    """A handler was registered twice for the same (aggregate type, event type), or is not callable
    with ``(event, fx)``."""


class NoHandlerError(ConsumerError):
    """No handler is registered for an event's (aggregate type, event type) and the app has no
    catch-all. Permanent: the record is dead-lettered with class ``UnknownEventType``."""

    def __init__(self, message: str, *, aggregate_type: str, event_type: str, fix: str | None = None) -> None:
        super().__init__(message, fix=fix)
        self.aggregate_type = aggregate_type
        self.event_type = event_type


class HandlerError(ConsumerError):
    """A handler raised after its in-place retries (permanent: dead-lettered as
    ``HandlerError:<exception class>``). ``__cause__`` is the handler's last exception."""

    def __init__(self, message: str, *, attempts: int, error: BaseException) -> None:
        super().__init__(message)
        self.attempts = attempts
        self.error = error


class DeadLetterError(ConsumerError):
    """A dead letter could not be written (Kafka refused or did not acknowledge the produce).
    Transient: the origin offset is not committed; the record is retried after a backoff."""


class AppImportError(ConsumerError):
    """``postbox consume MODULE:APP`` cannot import the module or find the app in it."""
