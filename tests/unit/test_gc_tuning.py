"""The consumer's collector tuning is counted across runtimes in one process: the last to stop
restores what the first found (two runtimes in one process overlapped: the first to stop must not
undo the tuning under the second, the second must not keep it)."""

from __future__ import annotations

import gc

from postbox.consumer.gc_tuning import GC_GEN0_THRESHOLD, tuned_collector


def test_overlapping_runtimes_restore_the_collector_when_the_last_one_stops() -> None:
    found, frozen = gc.get_threshold(), gc.get_freeze_count()
    first, second = tuned_collector(), tuned_collector()
    first.__enter__()
    assert gc.get_threshold()[0] == max(GC_GEN0_THRESHOLD, found[0])
    second.__enter__()
    first.__exit__(None, None, None)
    assert gc.get_threshold()[0] == max(GC_GEN0_THRESHOLD, found[0])  # the second still runs
    second.__exit__(None, None, None)
    assert gc.get_threshold() == found
    assert gc.get_freeze_count() == frozen


def test_a_host_that_froze_its_own_objects_keeps_its_freeze() -> None:
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with tuned_collector():
            pass
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()
