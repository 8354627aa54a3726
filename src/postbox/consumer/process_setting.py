"""A process-wide setting held while at least one consumer runtime runs, counted across runtimes.

Why one mechanism: the collector tuning (:mod:`postbox.consumer.gc_tuning`) and the short switch
interval (:mod:`postbox.consumer.switch_interval`) change state that belongs to the whole process,
and the process may be the application's own (a runtime in a thread of a web service, ``replay
--until --execute``, a test, several runtimes at once). Both follow the same rule: the first
runtime to start takes the setting (saving what it found), the last one to stop gives it back.
The count, its lock and the fork rule live here once; each module says only what it takes and
what it restores.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class CountedSetting:
    """``take`` runs when the first holder enters, ``give_back`` when the last one leaves;
    ``give_back_in_child`` (default ``give_back``) in a child forked while it was held."""

    def __init__(self, take: Callable[[], None], give_back: Callable[[], None],
                 give_back_in_child: Callable[[], None] | None = None) -> None:
        self._take = take
        self._give_back = give_back
        self._give_back_in_child = give_back_in_child or give_back
        self._lock = threading.Lock()
        self._holders = 0

    @contextmanager
    def held(self) -> Iterator[None]:
        """Hold the setting for the block's duration (given back on an error too)."""
        with self._lock:
            self._holders += 1
            if self._holders == 1:
                self._take()
        try:
            yield
        finally:
            with self._lock:
                if self._holders > 0:  # 0: entered before a fork, left in the child, already given back
                    self._holders -= 1
                    if self._holders == 0:
                        self._give_back()

    def forget_in_forked_child(self) -> None:
        """For ``os.register_at_fork(after_in_child=...)``: no runtime runs in a forked child
        (threads do not survive a fork), so nothing there would ever give the setting back: the
        child gives it back now, forgets the count and takes a fresh lock (another thread may have
        held it at the fork)."""
        self._lock = threading.Lock()
        if self._holders:
            self._holders = 0
            self._give_back_in_child()


__all__ = ["CountedSetting"]
