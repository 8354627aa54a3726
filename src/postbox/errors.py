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


class OutboxError(PostboxError):
    """The outbox table cannot be written: it is missing, or the role lacks a privilege."""


class RetentionError(PostboxError):
    """Outbox retention (partition maintenance or cleanup) could not run."""
