"""Whether a window run could apply an aggregate's events out of order beside its group: the rule.

A window and its group each apply their records in offset order, and an event reaches Redis once:
whichever of the two gets there second meets the marker. So the only way a window breaks an
aggregate's order is by *starting* ahead of the group: the records between the group's position
and the window's start are not applied yet, the window applies later events of their aggregates
first, and the group applies the earlier ones after them (`placed` after `shipped`).

Where the window *ends* does not matter by itself. A window starting at or before the group's
committed offset finds everything before its start applied; from there it goes in order, and so
does the group, so whichever applies an aggregate's later event has already seen (applied, or met
the marker of) every earlier one — the window may run past the group's position, beside the
running group or ahead of a stopped one. A record the window fails leaves its verdict in the
event's marker, so the group does not run it again after its successors either.

The group's position on a partition is its committed offset, read from Kafka before the window
runs. Without one, it is decided by the members' ``auto.offset.reset``, which Kafka does not
store (each member sets its own): under ``earliest`` the group begins at the earliest retained
record; under ``latest`` it began at the end of the partition of when it was assigned, and where
that was is not recorded until its first commit. Either way the safe reading is the earliest
retained record, so a window starting later there is refused without ``--force``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from postbox.errors import UnsafeReplayError

if TYPE_CHECKING:
    from postbox.incident.window import WindowRow

log = logging.getLogger("postbox.consumer")


@dataclass(frozen=True)
class Ahead:
    """One partition where the window starts ahead of where the group applies from."""

    topic: str
    partition: int
    #: The window's first offset.
    start: int
    #: Where the group applies from: its committed offset (never before the earliest retained
    #: record), or the earliest retained record when it has none.
    position: int
    #: The group's committed offset there (None: none).
    committed: int | None
    offset_reset: str = "earliest"

    @property
    def where(self) -> str:
        return f"{self.topic}[{self.partition}]"

    @property
    def gap(self) -> int:
        """Records before the window's start the group has not applied yet."""
        return self.start - self.position

    def describe(self) -> str:
        """What is ahead of what, and which records would come after the window."""
        records = f"offsets {self.position}..{self.start - 1} ({self.gap:,} record(s))"
        if self.committed is None:
            head = (f"{self.where}: the window starts at offset {self.start}, but the group has no committed offset here; "
                    + (f"with auto.offset.reset=earliest it begins at the earliest retained offset {self.position}, so {records} "
                       "are not applied yet" if self.offset_reset == "earliest" else
                       f"with auto.offset.reset=latest it began at the end of the partition when it was assigned, which is "
                       f"not recorded until it commits, so {records} may not be applied yet"))  # fmt: skip
        else:
            head = (f"{self.where}: the window starts at offset {self.start}, ahead of the group's committed offset "
                    f"{self.committed}: the group has not applied {records} yet")  # fmt: skip
        return f"{head}, and the window would apply later events of their aggregates before them"

    def short(self) -> str:
        """``topic[p]@start>committed`` (``none`` without a committed offset), for a log field."""
        return f"{self.where}@{self.start}>{'none' if self.committed is None else self.committed}"


def ahead_of_group(rows: Iterable[WindowRow], committed: Mapping[tuple[str, int], int], *,
                   offset_reset: str = "earliest") -> list[Ahead]:  # fmt: skip
    """The partitions of ``rows`` whose window starts ahead of the group (module docstring):
    ``committed`` is the group's committed offsets, ``offset_reset`` the members' setting."""
    found = []
    for r in rows:
        s = r.span
        if s.records <= 0:
            continue
        offset = committed.get(s.key)
        position = r.low if offset is None else max(r.low, offset)  # a committed offset retention deleted resets
        if s.start > position:
            found.append(Ahead(s.topic, s.partition, s.start, position, offset, offset_reset))
    return found


def window_ahead_error(group: str, ahead: list[Ahead], members: int) -> UnsafeReplayError:
    """The refusal: every partition ahead, and how to run the window safely."""
    catch_up = (f"wait for the group to catch up (its {members} member(s) are running: `postbox lag --group {group}` shows "
                "when its committed offsets reach the window's start)" if members else
                f"start the group and wait for it to catch up (`postbox lag --group {group}` shows when its committed "
                "offsets reach the window's start)")  # fmt: skip
    return UnsafeReplayError(
        f"refused to run the window of group {group}: it starts ahead of the group on {len(ahead)} partition(s): "
        + "; ".join(a.describe() for a in ahead),
        fix=f"{catch_up}, start the window at the group's position (--from committed), "
            "or pass --force to run it anyway (those aggregates may end in an older state)",
    )  # fmt: skip


def refuse_or_warn(group: str, ahead: list[Ahead], *, members: int, force: bool) -> None:
    """Raise :func:`window_ahead_error` unless ``force``; forced, log a warning naming the partitions."""
    if not ahead:
        return
    if not force:
        raise window_ahead_error(group, ahead, members)
    from postbox.consumer.logs import log_event  # here: the dry run of `replay` needs no consumer runtime

    log_event(log, logging.WARNING, "window forced ahead of its group: earlier events of these partitions' aggregates may be applied after later ones",
              group=group, partitions=",".join(a.short() for a in ahead))  # fmt: skip


__all__ = ["Ahead", "ahead_of_group", "refuse_or_warn", "window_ahead_error"]
