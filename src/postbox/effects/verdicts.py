"""What a dedupe marker's value says: the event applied, or the group's failure verdict on it.

A marker is ``1`` once its event applied. An event that failed leaves its **verdict** in the same
key instead, with the same TTL, so the verdict outlives the process that reached it and binds
whoever reads the event next — the same consumer after a crash, the partition's next owner, a
window run:

- ``F<payload>``: failed, its dead letter owed (not acknowledged yet);
- ``D<payload>``: failed, its dead letter acknowledged.

Why in the marker: an effect that failed is judged in the same script call as the events after
it, which apply at once; written by that call (``lua/apply_effects.lua``), the verdict is on the
server before any successor is, so a record whose effect failed can never run again after them,
whatever happens to the process, its dead letter or its commit. A handler's failure is written
(``SET NX``) before the batch's apply is sent. One key, one slot, one TTL: nothing more to read on
the hot path (a marker found is read with ``GET`` instead of ``EXISTS``).

The payload says what failed, enough to write the dead letter again without running the event:

- ``effect\\n<command index>\\n<op>\\n<Redis error>`` (written by the script), or
- ``handler\\n<error class>\\n<error>`` (written by the runtime).

A copy an operator sent on purpose (``postbox dlq replay``: header ``postbox.replay.of``) is not
bound: it runs, and leaves its own marker or verdict (:class:`~postbox.effects.keys.ReplayRef`).
"""

from __future__ import annotations

from dataclasses import dataclass

from postbox import failure_classes as classes

#: The value of an applied event's marker.
APPLIED = b"1"
#: First byte of a verdict whose dead letter is owed / acknowledged.
OWED, DELIVERED = b"F", b"D"
#: Longest error text kept in a verdict (the dead letter's own limit).
MAX_VERDICT_ERROR = 2000


@dataclass(frozen=True)
class Verdict:
    """A failure verdict read from a marker: its class and text, and whether its dead letter was
    acknowledged already."""

    error_class: str
    error: str
    delivered: bool


def is_verdict(value: bytes | None) -> bool:
    """Whether a marker's value is a failure verdict (not an applied event's ``1``)."""
    return bool(value) and value[:1] in (OWED, DELIVERED)  # type: ignore[index]


def handler_verdict(error_class: str, error: str, *, delivered: bool = False) -> bytes:
    """The marker value of a failure the runtime found (a handler's, or an effect's being paid)."""
    text = error[:MAX_VERDICT_ERROR]
    return (DELIVERED if delivered else OWED) + f"handler\n{error_class}\n{text}".encode("utf-8", "replace")


def parse_verdict(value: bytes) -> Verdict:
    """The verdict in a marker value :func:`is_verdict` accepted. A payload this version cannot
    read still is a verdict (the event failed): its text says so."""
    delivered = value[:1] == DELIVERED
    text = value[1:].decode("utf-8", "replace")
    source, _, rest = text.partition("\n")
    if source == "handler":
        error_class, _, error = rest.partition("\n")
        return Verdict(error_class or classes.PERMANENT, error, delivered)
    if source == "effect":
        index, _, rest = rest.partition("\n")
        op, _, error = rest.partition("\n")
        code = classes.redis_error_code(error)
        return Verdict(classes.effect_failed(code), f"effect failed at command {index} ({op}): {error}", delivered)
    return Verdict(classes.effect_failed(classes.GENERIC_REDIS_CODE), f"failed earlier (verdict {text[:200]!r})", delivered)


__all__ = ["APPLIED", "DELIVERED", "MAX_VERDICT_ERROR", "OWED", "Verdict", "handler_verdict", "is_verdict", "parse_verdict"]
