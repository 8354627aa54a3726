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
