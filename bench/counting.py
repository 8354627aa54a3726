"""The rule every benchmark here ends with: it exits non-zero when it counted fewer events than it sent.

A benchmark whose observation broke (a hook no longer called, a consumer that stopped, a topic
read from the wrong offset) measures nothing and still prints a table; a rate over the events it
did count, or a latency percentile over none, looks like a result. Each bench adds a
:class:`Tally` per thing it sent (events emitted, produced, applied) and calls
:func:`require_full_counts` once its figures are printed: a short tally then ends the process with
exit code 1 and names what fell short, so ``bench/report.py`` and CI mark the run failed.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Tally:
    """``sent`` events of ``what`` went in; ``counted`` of them were seen where the bench measures."""

    what: str
    sent: int
    counted: int

    @property
    def short(self) -> bool:
        return self.counted < self.sent


def shortfalls(tallies: Iterable[Tally]) -> list[str]:
    """One line per tally that counted fewer events than it sent (none: every count is full)."""
    return [f"{t.what}: counted {t.counted:,} of {t.sent:,} events sent ({t.sent - t.counted:,} missing)" for t in tallies if t.short]


def require_full_counts(tallies: Iterable[Tally]) -> None:
    """Exit with code 1, naming each short tally on stderr, unless every tally is full."""
    short = shortfalls(tallies)
    if short:
        for line in short:
            print(f"bench: COUNT SHORT: {line}", file=sys.stderr, flush=True)
        raise SystemExit(1)
