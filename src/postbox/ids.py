"""What an event id is — one rule for the consumer, ``postbox trace`` and ``postbox dlq``.

The event id is the dedupe key: the consumer marks it applied in Redis, and the incident commands
look events up by it. It arrives in the record's ``id`` header, which the Outbox Event Router
copies from the outbox table's id column (``table.field.event.id``, default ``id``). postbox's own
table has ``id uuid`` (UUIDv7), and so does the router's documented default table; but the option
lets a stock setup name any column, so a ``bigint`` or ``varchar`` id arrives as its text ("42",
"order-42-created"). So an event id is **1 to 200 printable ASCII characters without spaces**
(``!`` to ``~``): every UUID and every such key passes; empty, blank, control characters, non-ASCII
and huge values do not (they are dead-lettered as ``DecodeError``, never used as a key).

Ids are compared exactly as they arrive: the consumer never rewrites one (a changed key would meet
no marker). Only text a person types (``postbox trace ID``, ``--event-id``) is tidied: surrounding
whitespace is dropped, and a UUID written in another form (upper case, braces, no hyphens) is read
as its canonical lowercase form, which is what a ``uuid`` column sends.
"""

from __future__ import annotations

import uuid

MAX_EVENT_ID_CHARS = 200
RULE = f"1-{MAX_EVENT_ID_CHARS} printable ASCII characters without spaces, e.g. a UUID such as 01890a5d-ac96-7abc-8def-0123456789ab"


def is_event_id(text: str | None) -> bool:
    """True when ``text`` may be used as an event id, exactly as it is.

    ASCII whose every character is printable is exactly ``!`` to ``~`` plus the space (the C0
    controls and DEL are not printable), so with the space refused this is the rule; the consumer
    asks it for every record, and these C string checks cost half of a regular expression match."""
    if not text:
        return False
    return len(text) <= MAX_EVENT_ID_CHARS and text.isascii() and text.isprintable() and " " not in text


def event_id_problem(text: str | None) -> str | None:
    """Why ``text`` is not an event id (None when it is one)."""
    if text is None or text == "":
        return "is empty"
    if is_event_id(text):
        return None
    if len(text) > MAX_EVENT_ID_CHARS:
        return f"has {len(text)} characters (at most {MAX_EVENT_ID_CHARS})"
    bad = next(ch for ch in text if not ("\x21" <= ch <= "\x7e"))
    return f"contains {bad!r} (allowed: {RULE})"


def parse_event_id(text: str) -> str:
    """An event id typed by a person: stripped, UUIDs in canonical form; ValueError naming the rule."""
    cleaned = (text or "").strip()
    try:
        as_uuid = uuid.UUID(cleaned)
    except (ValueError, AttributeError, TypeError):
        as_uuid = None
    if as_uuid is not None:
        return str(as_uuid)
    problem = event_id_problem(cleaned)
    if problem is not None:
        raise ValueError(f"{text!r} is not an event id: it {problem} (an event id is {RULE})")
    return cleaned


__all__ = ["MAX_EVENT_ID_CHARS", "RULE", "event_id_problem", "is_event_id", "parse_event_id"]
