"""Failure classification in one table: which Redis error codes are transient, and the
``error_class`` strings that dead letters, the failure stream and the metrics carry.

Why one module: the effects engine (apply script replies) and the consumer's failure-stream writer
both decide "retry or not" from a Redis error code, and the dead-letter contract
(``postbox.error_class``) is read by on-call tools and dashboards. Two copies drift (they had:
the failure-stream writer missed NOREPLICAS, MOVED and ASK); so both import this table.

Error classes (docs/consumer.md, "Failures"):

==========================  =========  ==================================================
class                       kind       meaning
==========================  =========  ==================================================
``DecodeError``             permanent  the record's bytes cannot be read
``SchemaMismatch``          permanent  the writer schema cannot be read into the reader's
``UnknownEventType``        permanent  no handler for the event's aggregate/event type, or
                                       no schema here for an Avro event's type
``RoutingError``            permanent  routing the event raised
``<ExceptionName>``         permanent  the handler raised an error that is permanent at once
``HandlerError:<Name>``     permanent  the handler kept raising ``<Name>`` after its retries
``EffectFailed:<CODE>``     permanent  a command of the effect failed (``WRONGTYPE``, ...)
``RetriesSpent:<reason>``   permanent  a transient failure outlasted the retry budget
``Transient:<reason>``      transient  retried with backoff, never committed past
==========================  =========  ==================================================
"""

from __future__ import annotations

from typing import Any

#: Redis error codes that heal by waiting: the call is retried with backoff, never skipped.
#: (OOM: the script's flags leave out ``allow-oom``; BUSY: another script runs; LOADING: a restart
#: reads its data; TRYAGAIN/MOVED/ASK/CLUSTERDOWN: a slot is migrating or a master failing over;
#: MASTERDOWN/READONLY: a replica answered; NOREPLICAS/MISCONF: persistence or replication not
#: available yet; NOSCRIPT: the script cache was flushed, the engine loads it again.)
TRANSIENT_REDIS_CODES = frozenset(
    {"OOM", "BUSY", "LOADING", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "READONLY",
     "NOREPLICAS", "MISCONF", "NOSCRIPT", "MOVED", "ASK"}
)  # fmt: skip

PERMANENT = "permanent"
TRANSIENT = "transient"

DECODE_ERROR = "DecodeError"
SCHEMA_MISMATCH = "SchemaMismatch"
UNKNOWN_EVENT_TYPE = "UnknownEventType"
ROUTING_ERROR = "RoutingError"
#: The code of an effect failure whose reply carries no upper-case error code.
GENERIC_REDIS_CODE = "ERR"
CROSS_SLOT = "CROSSSLOT"


def redis_error_code(error: Any) -> str:
    """The leading code of a Redis error (an exception or its text): ``WRONGTYPE Operation ...`` →
    ``WRONGTYPE``; free text → ``ERR``."""
    code = getattr(error, "status_code", None)
    if isinstance(code, str) and code:
        return code
    text = str(error or "")
    head = text.split(" ", 1)[0].strip(":")
    return head if head and head.isupper() and head.replace("_", "").isalpha() else GENERIC_REDIS_CODE


def is_transient_redis_error(error: Any) -> bool:
    """True when the Redis error (exception or text) is one that retrying fixes."""
    return redis_error_code(error) in TRANSIENT_REDIS_CODES


def transient(reason: str) -> str:
    """``Transient:<reason>`` (reason: ``connection``, ``dlq``, ``handler``, a Redis code...)."""
    return f"Transient:{reason}"


def handler_gave_up(exc: BaseException) -> str:
    """A handler that kept raising after its in-place retries."""
    return f"HandlerError:{type(exc).__name__}"


def handler_refused(exc: BaseException) -> str:
    """A handler error that is permanent at once (``InvalidEffectError``, a 4xx answer...)."""
    return type(exc).__name__


def retries_spent(reason: str) -> str:
    """A record still failing transiently (``reason``: the exception) when its retry budget ran out."""
    return f"RetriesSpent:{reason}"


def effect_failed(code: str) -> str:
    """A command of the effect failed with Redis error ``code``."""
    return f"EffectFailed:{code}"
