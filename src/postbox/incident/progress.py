"""Progress of long scans on stderr: quiet for the first second, then at most one line a second."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class ScanProgress:
    """``progress(scanned, total)`` callable for :meth:`Kafka.scan` and the Redis SCAN fallback.

    ``write`` receives each line (default: stderr); the CLI passes its styled console, so this
    module does not import the CLI."""

    def __init__(
        self, label: str, *, enabled: bool = True, delay: float = 1.0, every: float = 1.0,
        write: Callable[[str], None] = _to_stderr,
    ) -> None:  # fmt: skip
        self.label = label
        self.write = write
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
        self.write(f"… {self.label}: {done:,}{of}{pct}, {now - self.start:.0f} s")

    def note(self, message: str) -> None:
        if self.enabled:
            self.write(f"… {message}")
