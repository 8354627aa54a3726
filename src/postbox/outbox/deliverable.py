"""What the connector can deliver: the rules an outbox row must meet to reach Kafka.

Why: the Debezium task publishes rows in WAL order and has no way to skip one. A row whose
``aggregate_type`` makes an illegal topic name fails the task ("Error while attempting to describe
topics 'outbox.event.order items/x'"), a 2 MB ``aggregate_id`` fails it with RecordTooLargeException
(the key rides in the same produce request as the payload), and a restart re-reads the same row
and fails again: every event behind it waits, for every aggregate (measured on the local stack).
So the writer refuses such rows before any SQL, and the database refuses them from any other writer:
the four columns are domain types whose constraints apply exactly these numbers
(``src/postbox/sql/050_deliverable.sql``; a test keeps the two in step).

Limits:
- aggregate type: ``[A-Za-z0-9._-]``, and ``outbox.event.<type>.dlq`` at most 249 characters (the
  dead-letter topic must be legal too), so at most 232 characters;
- aggregate id (the Kafka key): 1 to 4,096 UTF-8 bytes. A record is key + payload + headers in one
  produce request, capped by Connect's ``max.request.size`` (1,048,576) and the broker's
  ``message.max.bytes`` (1,048,588); the payload may take 1,000,000 bytes, which leaves about 48 KB
  for the key, the headers and the framing. 4 KiB is far above any real id and keeps that sum safe;
- event type (a header): 1 to 255 characters; traceparent (a header): at most 512 bytes;
- the key and the event type are text PostgreSQL can store and Kafka can carry: no NUL character
  (a ``text`` value cannot hold one) and no lone surrogate (UTF-8 cannot encode one). Without this
  check psycopg refused them with its own ``DataError`` / ``UnicodeEncodeError``, naming no field.
  (The aggregate type's alphabet already excludes both.)
The payload's own limit lives in ``outbox/rows.py`` (configurable with the broker's limits).
"""

from __future__ import annotations

import re
from typing import Any

from postbox.outbox.sql_text import sql_text
from postbox.pipelines import DEFAULT, Pipeline
from postbox.topics import DLQ_SUFFIX, MAX_TOPIC_NAME, TOPIC_CHARS, TOPIC_PREFIX

MAX_AGGREGATE_TYPE = MAX_TOPIC_NAME - len(TOPIC_PREFIX) - len(DLQ_SUFFIX)
MAX_KEY_BYTES = 4096
MAX_EVENT_TYPE = 255
MAX_TRACEPARENT_BYTES = 512
#: The columns whose domain types (``postbox.<column>``) apply these rules to every writer; each
#: domain's constraint is ``<column>_deliverable``.
RULED_COLUMNS = ("aggregate_type", "aggregate_id", "event_type", "traceparent")
#: How the rules are named in reports: what `postbox db init` and `postbox doctor` print.
RULES = "the domains of the outbox's columns (aggregate_type, aggregate_id, event_type, traceparent)"

_LEGAL_TYPE = re.compile(f"[{TOPIC_CHARS}]+")


def aggregate_type_problem(aggregate_type: object) -> str | None:
    """Why ``aggregate_type`` cannot name a topic, or None."""
    if not isinstance(aggregate_type, str) or not aggregate_type:
        return f"aggregate_type {aggregate_type!r} must be a non-empty string (it names the topic)"
    if not _LEGAL_TYPE.fullmatch(aggregate_type):
        bad = sorted({c for c in aggregate_type if not _LEGAL_TYPE.fullmatch(c)})
        return (f"aggregate_type {_short(aggregate_type)!r} makes topic {TOPIC_PREFIX}{shown(aggregate_type)}, "
                f"which Kafka refuses: only letters, digits, '.', '_' and '-' are legal (found {''.join(bad)!r})")
    if len(aggregate_type) > MAX_AGGREGATE_TYPE:
        return (f"aggregate_type is {len(aggregate_type)} characters: topic {TOPIC_PREFIX}<type>{DLQ_SUFFIX} would pass "
                f"Kafka's {MAX_TOPIC_NAME}-character limit (at most {MAX_AGGREGATE_TYPE})")
    return None


def key_problem(aggregate_id: str) -> str | None:
    """Why ``aggregate_id`` cannot be the Kafka key, or None (for every key :func:`plain_key` does
    not pass at a glance: one strict encode and one search for NUL when the key is good)."""
    try:
        size = len(aggregate_id.encode("utf-8"))
    except UnicodeEncodeError as exc:
        return _not_text("aggregate_id", aggregate_id, exc.start)
    if size == 0:
        return "aggregate_id must not be empty (it is the Kafka key)"
    if size > MAX_KEY_BYTES:
        return (f"aggregate_id is {size:,} bytes, over the {MAX_KEY_BYTES:,}-byte key limit "
                "(key, payload and headers must fit one Kafka produce request)")
    if "\x00" in aggregate_id:
        return _not_text("aggregate_id", aggregate_id, aggregate_id.index("\x00"))
    return None


def plain_key(aggregate_id: str) -> bool:
    """Whether ``aggregate_id`` (a str) passes every key rule at a glance: 1 to 4,096 ASCII
    characters (so as many bytes), none of them NUL. Why: the writer's fast path for a known event
    type checks only this; any other key takes the full check (:func:`key_problem` and the
    writer's own), so a rule added there needs nothing here as long as ASCII keys without NUL
    still pass it."""
    return 0 < len(aggregate_id) <= MAX_KEY_BYTES and aggregate_id.isascii() and "\x00" not in aggregate_id


def event_type_problem(event_type: object) -> str | None:
    """Why ``event_type`` cannot travel as a header, or None."""
    if not isinstance(event_type, str) or not event_type:
        return f"event_type {event_type!r} must be a non-empty string"
    if len(event_type) > MAX_EVENT_TYPE:
        return f"event_type is {len(event_type)} characters, over the {MAX_EVENT_TYPE}-character limit"
    for index, char in enumerate(event_type):
        if char == "\x00" or "\ud800" <= char <= "\udfff":
            return _not_text("event_type", event_type, index)
    return None


def _not_text(field: str, text: str, index: int) -> str:
    """The problem of a NUL or a lone surrogate at ``text[index]``."""
    char = text[index]
    what = ("a NUL character, which PostgreSQL text cannot store" if char == "\x00"
            else f"a lone surrogate ({char!r}), which is not text: UTF-8 cannot encode it")
    return f"{field} {shown(text)!r} has {what} (at index {index})"


def shown(text: str, limit: int = 60) -> str:
    """``text`` as an error message may show it: shortened, and with NUL, lone surrogates and other
    unprintable characters escaped (a raw one made printing or logging the message fail)."""
    short = _short(text, limit)
    return short if short.isprintable() else repr(short)[1:-1]


def database_rules_state(conn: Any, pipeline: Pipeline = DEFAULT) -> bool | None:
    """Whether the database applies the rules to every writer of ``pipeline``'s outbox: None when a
    column lacks its domain or a domain its constraint, else whether every constraint is validated
    (a NOT VALID one still refuses new rows; older rows may break it). ``conn``: a psycopg connection."""
    row = conn.execute(pipeline.sql(_STATE_SQL)).fetchone()
    return None if row is None or row[0] is None else bool(row[0])


_STATE_SQL = sql_text("deliverable_state.sql")


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


__all__ = [
    "MAX_AGGREGATE_TYPE", "MAX_EVENT_TYPE", "MAX_KEY_BYTES", "MAX_TRACEPARENT_BYTES", "RULED_COLUMNS", "RULES",
    "aggregate_type_problem", "database_rules_state", "event_type_problem", "key_problem", "plain_key", "shown",
]
