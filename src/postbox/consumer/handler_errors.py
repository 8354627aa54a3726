"""What an exception raised by a handler means: retry later (transient) or dead-letter (permanent).

A handler's own dependencies fail too: an HTTP service answers 503, a socket times out, DNS is
down. Dead-lettering such an event after a few in-place retries (~100 ms) would turn a short outage
of the dependency into lost work for the on-call engineer. So these are **transient**: the
record's partition stops at it, is paused with exponential backoff and retried from it, never
committed past, however long the outage lasts (other partitions keep flowing). One table decides,
first match wins:

1. the handler's own declaration: ``@app.handler(..., transient=(QuotaExceeded,))``;
2. :class:`Retry` (raise it to say "later", e.g. ``raise Retry("ledger busy") from exc``) and
   :class:`~postbox.errors.TransientEffectError` → transient;
3. an HTTP error carrying its response (``httpx.HTTPStatusError``, ``requests.HTTPError``) →
   transient for 408, 425, 429, 500, 502, 503, 504, permanent for any other status;
4. :class:`~postbox.errors.InvalidEffectError` and :class:`~postbox.errors.DecodeError` →
   permanent at once (the handler described something that can never be applied), and so is
   ``SystemExit`` (a handler that exits will exit again);
5. connection and timeout errors: built-in ``ConnectionError``, ``TimeoutError``, ``OSError``
   (except the file-system ones below, which do not heal by waiting), redis-py's, httpx's
   ``TransportError`` family → transient;
6. anything else → permanent after ``1 + handler_retries`` attempts (retried in place first).
"""

from __future__ import annotations

import enum

import redis

from postbox.errors import DecodeError, InvalidEffectError, TransientEffectError

#: HTTP statuses that say "try again later".
TRANSIENT_HTTP_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})
#: OSErrors that waiting does not fix: deterministic answers of the file system.
PERMANENT_OS_ERRORS = (FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError, PermissionError)
#: Exception class names of HTTP clients whose whole family is a transport failure (matched by
#: name so that postbox needs none of these clients installed).
_TRANSPORT_FAMILIES = {("httpx", "TransportError"), ("requests.exceptions", "ConnectionError"), ("requests.exceptions", "Timeout")}


class Retry(Exception):
    """Raise from a handler when the event cannot be handled *now* but may be later (a dependency
    is down, a lock is held): the runtime retries it with backoff and never dead-letters it."""


class Verdict(str, enum.Enum):
    TRANSIENT = "transient"  # pause the partition, retry from this record after a backoff
    PERMANENT = "permanent"  # dead-letter now (the handler can never succeed as described)
    RETRY_IN_PLACE = "retry"  # retry up to handler_retries times, then dead-letter


def classify(exc: BaseException, declared_transient: tuple[type[BaseException], ...] = ()) -> Verdict:
    """The verdict on a handler's exception (see the module docs for the table)."""
    if declared_transient and isinstance(exc, declared_transient):
        return Verdict.TRANSIENT
    if isinstance(exc, (Retry, TransientEffectError)):
        return Verdict.TRANSIENT
    status = _http_status(exc)
    if status is not None:
        return Verdict.TRANSIENT if status in TRANSIENT_HTTP_STATUS else Verdict.RETRY_IN_PLACE
    if isinstance(exc, (InvalidEffectError, DecodeError, SystemExit)):
        return Verdict.PERMANENT
    if _is_transport_failure(exc):
        return Verdict.TRANSIENT
    return Verdict.RETRY_IN_PLACE


def _http_status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    return status if isinstance(status, int) else None


def _is_transport_failure(exc: BaseException) -> bool:
    if isinstance(exc, (redis.ConnectionError, redis.TimeoutError, ConnectionError, TimeoutError)):
        return True
    if isinstance(exc, OSError):
        return not isinstance(exc, PERMANENT_OS_ERRORS) and not _is_client_error_family(exc)
    return any((cls.__module__, cls.__name__) in _TRANSPORT_FAMILIES for cls in type(exc).__mro__)


def _is_client_error_family(exc: OSError) -> bool:
    """requests' exceptions are OSErrors; only its transport ones are transient."""
    mro = type(exc).__mro__
    if not any(cls.__module__.startswith("requests") for cls in mro):
        return False
    return not any((cls.__module__, cls.__name__) in _TRANSPORT_FAMILIES for cls in mro)


__all__ = ["PERMANENT_OS_ERRORS", "TRANSIENT_HTTP_STATUS", "Retry", "Verdict", "classify"]
