"""Progress of long scans on stderr: quiet for the first second, then at most one line a second."""

from __future__ import annotations

import time

from postbox.cli.output import err_console


class Progress:
    """``progress(scanned, total)`` callable for :meth:`Kafka.scan` and the Redis SCAN fallback."""

    def __init__(self, label: str, *, enabled: bool = True, delay: float = 1.0, every: float = 1.0) -> None:
        self.label = label
        self.enabled = enabled
        self.start = time.monotonic()
        self.delay = delay
        self.every = every
        self._last = 0.0
        self.shown = False

    def __call__(self, done: int, total: int | None = None) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.start < self.delay or now - self._last < self.every:
            return
        self._last = now
        self.shown = True
        of = f" of {total:,}" if total else ""
        pct = f" ({100 * done / total:.0f}%)" if total else ""
        err_console.print(f"[dim]…[/] {self.label}: {done:,}{of}{pct}, {now - self.start:.0f} s", highlight=False)

    def note(self, message: str) -> None:
        if self.enabled:
            err_console.print(f"[dim]…[/] {message}", highlight=False)
