"""The consumer's collector tuning is counted across runtimes in one process: the last to stop
restores what the first found (two runtimes in one process overlapped: the first to stop must not
undo the tuning under the second, the second must not keep it)."""

from __future__ import annotations

import ast
import gc
import os

import pytest

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


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX-only")
def test_a_process_forked_while_a_runtime_runs_has_the_hosts_threshold() -> None:
    """A child forked while a consumer runs (a handler's process pool, a pre-forking server) runs
    no consumer, so nothing there would ever give the threshold back: it must start with the
    host's, keep what was frozen (unfreezing would copy the pages the fork shares), and a runtime
    of its own must still tune and restore. Before: the child kept 20,000 for good."""
    found = gc.get_threshold()
    frozen_before = gc.get_freeze_count()
    with tuned_collector():
        frozen_in_parent = gc.get_freeze_count()
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report, then leave without running pytest's teardown
            try:
                start = (gc.get_threshold(), gc.get_freeze_count())
                with tuned_collector():
                    during = gc.get_threshold()
                os.write(write_end, repr((start, during, gc.get_threshold(), gc.get_freeze_count())).encode())
            finally:
                os._exit(0)
        os.close(write_end)
        os.waitpid(pid, 0)
        with os.fdopen(read_end) as report:
            (start_threshold, start_frozen), during, after, frozen_after = ast.literal_eval(report.read())
        assert gc.get_threshold()[0] == max(GC_GEN0_THRESHOLD, found[0])  # the parent's runtime still runs
    assert start_threshold == found
    # still frozen (a few frozen objects die in the child: the parent's other threads' state)
    assert start_frozen > 0.9 * frozen_in_parent
    assert during[0] == max(GC_GEN0_THRESHOLD, found[0])
    assert after == found
    assert frozen_after > 0.9 * frozen_in_parent
    assert gc.get_threshold() == found and gc.get_freeze_count() == frozen_before
