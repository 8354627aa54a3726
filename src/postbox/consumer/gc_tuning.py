"""The garbage collector tuned for a consumer while one runs, and left as it was found after.

A running consumer keeps ~15 objects per record alive until its batch is settled (Event, payload,
Effects, ...). With Python's default young-generation threshold (700 allocations) the collector
walked each of them several times before it died — 3-5 µs of the loop's per-event CPU (5,000
bench records, paired runs) — and every full collection walked everything alive since start-up
(modules, schemas, compiled checks, the app, clients): ~30 ms with the GIL held, both threads
stopped, several times a run. So while a consumer runs, the young generation is collected every
20,000 allocations and what is alive at start-up is frozen (``gc.freeze``: out of the collector's
reach; everything allocated later is collected as usual; garbage without cycles is freed by
reference counting as before, only cyclic garbage waits a little longer).

The process may be the application's own (a runtime in a thread of a web service, ``replay --until
--execute``, a test), so the tuning is counted: the first runtime to start applies it, the last to
stop restores the threshold it found and unfreezes what it froze. A host that froze its own objects
before any runtime started keeps managing its freeze: nothing is frozen or unfrozen then.

A process forked while a consumer runs (a handler's process pool, a pre-forking server) runs no
consumer (threads do not survive a fork), so nothing there would ever give the threshold back: the
child starts with the host's threshold (:mod:`postbox.consumer.process_setting`'s fork rule, as
the switch interval does). What was frozen stays frozen in the child: unfreezing would let the
child's next full collection walk, and write to, every object the parent froze, copying the
memory pages the fork shares (what ``gc.freeze`` before a fork is for).
"""

from __future__ import annotations

import gc
import os
from contextlib import AbstractContextManager

from postbox.consumer.process_setting import CountedSetting

#: The collector's youngest-generation threshold while a consumer runs (Python's default: 700).
GC_GEN0_THRESHOLD = 20_000

_found_threshold: tuple[int, int, int] = (700, 10, 10)
_froze = False


def _take() -> None:
    global _found_threshold, _froze
    _found_threshold = gc.get_threshold()  # type: ignore[assignment]  # typeshed: tuple[int, ...]
    _froze = gc.get_freeze_count() == 0
    gc.collect()
    if _froze:
        gc.freeze()
    gen0, gen1, gen2 = _found_threshold
    gc.set_threshold(max(GC_GEN0_THRESHOLD, gen0), gen1, gen2)


def _give_back() -> None:
    gc.set_threshold(*_found_threshold)
    if _froze:
        gc.unfreeze()


def _give_back_threshold() -> None:
    """In a forked child: the host's threshold; the freeze is kept (module docstring)."""
    gc.set_threshold(*_found_threshold)


_setting = CountedSetting(_take, _give_back, give_back_in_child=_give_back_threshold)

if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_setting.forget_in_forked_child)


def tuned_collector() -> AbstractContextManager[None]:
    """Tune the collector for the block's duration (counted across runtimes; module docs)."""
    return _setting.held()
