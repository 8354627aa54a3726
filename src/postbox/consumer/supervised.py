"""A worker's side of ``postbox consume --workers N``: what it is told by its supervisor, and how it
notices a supervisor that died without stopping it.

The supervisor (:mod:`postbox.consumer.supervisor`) starts each worker with
:data:`SUPERVISOR_PID_ENV` set to its own pid. Why a worker watches it: the workers run in process
groups of their own (so a terminal's Ctrl-C is forwarded once, not delivered twice), so a
supervisor killed with SIGKILL takes no worker with it; an orphaned worker would keep its
partitions with nobody to stop or restart it. Once its parent is no longer that pid, the worker
stops as on SIGTERM: it finishes its batch, commits and leaves the group.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping

from postbox.consumer.logs import log_event

log = logging.getLogger("postbox.consumer")

#: The supervisor's pid, in each worker's environment.
SUPERVISOR_PID_ENV = "POSTBOX_SUPERVISOR_PID"
#: The worker's slot (0 .. N-1), in each worker's environment (for its logs).
WORKER_INDEX_ENV = "POSTBOX_WORKER_INDEX"
#: How often a worker looks at its parent.
WATCH_INTERVAL_S = 1.0


def supervisor_pid(environ: Mapping[str, str] | None = None) -> int | None:
    """The supervisor's pid when this process is a supervised worker, else None."""
    raw = (os.environ if environ is None else environ).get(SUPERVISOR_PID_ENV, "")
    return int(raw) if raw.isdigit() else None


def watch_supervisor(expected_pid: int, stop: Callable[[], None], *, parent: Callable[[], int] = os.getppid,
                     interval_s: float = WATCH_INTERVAL_S) -> threading.Thread:  # fmt: skip
    """Call ``stop`` once this process's parent is no longer ``expected_pid`` (a daemon thread)."""

    def watch() -> None:
        gone = threading.Event()
        while parent() == expected_pid:
            gone.wait(interval_s)
        log_event(log, logging.WARNING, "the supervisor is gone: stopping this worker", supervisor_pid=expected_pid)
        stop()

    thread = threading.Thread(target=watch, name="postbox-supervisor-watch", daemon=True)
    thread.start()
    return thread
