"""The interpreter's thread switch interval shortened while a consumer runs, and restored after.

Why: a consumer has two Python threads. The loop thread decodes records and runs handlers: Python
that never blocks. The apply worker mostly waits for Redis's reply with the GIL released; when the
reply arrives it needs the GIL back to read it, and a thread that never blocks only gives the GIL
up when the interpreter asks it to, once per switch interval (``sys.setswitchinterval``: 5 ms by
default). So every apply's reply waited up to 5 ms behind the loop thread — time in which Redis
idles and the batch's offsets wait. With 0.5 ms the worker gets the GIL back ten times sooner:
``bench/consumer.py --quick`` applied 8-10 % more events per second on a quiet machine and
23-60 % more at load ~1.7 (the apply's wall time per batch ~20 -> ~11-16 ms), alternated pairs.
Shorter is not better: at 0.2 ms the loop thread's CPU per event rose by ~2-3 µs (more forced
switches) and the rate fell below 0.5 ms's (three alternated pairs: 27.7k/28.0k/28.8k vs
33.9k/29.7k/31.2k events/s).

The interval is process-wide and the process may be the application's own (a runtime in a thread
of a web service, ``replay --until --execute``, a test), so like the collector tuning
(:mod:`postbox.consumer.gc_tuning`) it is counted: the first runtime to start sets it, the last to
stop restores the interval it found. A host that already runs with a shorter interval keeps it.
A process forked while a consumer runs (a handler's process pool, a pre-forking server) runs no
consumer — threads do not survive a fork — so nothing there would ever restore the interval: the
child forgets the count and goes back to the interval the first runtime found.
"""

from __future__ import annotations

import os
import sys
from contextlib import AbstractContextManager

from postbox.consumer.process_setting import CountedSetting

#: The switch interval (seconds) while a consumer runs (Python's default: 0.005).
SWITCH_INTERVAL_S = 0.0005

_found_interval = 0.005


def _take() -> None:
    global _found_interval
    _found_interval = sys.getswitchinterval()
    sys.setswitchinterval(min(SWITCH_INTERVAL_S, _found_interval))


def _give_back() -> None:
    sys.setswitchinterval(_found_interval)


_setting = CountedSetting(_take, _give_back)

if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_setting.forget_in_forked_child)


def short_switch_interval() -> AbstractContextManager[None]:
    """Shorten the switch interval for the block's duration (counted across runtimes; module docs)."""
    return _setting.held()


__all__ = ["SWITCH_INTERVAL_S", "short_switch_interval"]
