"""The consumer's short thread switch interval (#14.2) is counted across runtimes in one process:
the first to start sets it, the last to stop restores what the first found, and a host running
with a shorter interval keeps it."""

from __future__ import annotations

import ast
import os
import sys

import pytest

from postbox.consumer.switch_interval import SWITCH_INTERVAL_S, short_switch_interval


@pytest.fixture
def default_interval():
    found = sys.getswitchinterval()
    sys.setswitchinterval(0.005)
    yield 0.005
    sys.setswitchinterval(found)


def test_overlapping_runtimes_restore_the_interval_when_the_last_one_stops(default_interval) -> None:
    first, second = short_switch_interval(), short_switch_interval()
    first.__enter__()
    assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL_S, rel=0.05)
    second.__enter__()
    first.__exit__(None, None, None)
    assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL_S, rel=0.05)  # the second still runs
    second.__exit__(None, None, None)
    assert sys.getswitchinterval() == pytest.approx(default_interval, rel=0.05)


def test_a_host_with_a_shorter_interval_keeps_it(default_interval) -> None:
    sys.setswitchinterval(SWITCH_INTERVAL_S / 5)
    with short_switch_interval():
        assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL_S / 5, rel=0.05)
    assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL_S / 5, rel=0.05)


def test_the_interval_is_restored_when_the_runtime_fails(default_interval) -> None:
    with pytest.raises(RuntimeError), short_switch_interval():
        raise RuntimeError("the loop stopped on an error")
    assert sys.getswitchinterval() == pytest.approx(default_interval, rel=0.05)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX-only")
def test_a_process_forked_while_a_runtime_runs_has_the_hosts_interval(default_interval) -> None:
    """A child forked while a consumer runs (a handler's process pool, a pre-forking server) runs
    no consumer — threads do not survive a fork — so nothing there would ever restore the interval:
    it must start with the host's, and a runtime of its own must still set and restore it. Shown to
    fail without the fork hook (the child kept 0.5 ms before and after its own runtime)."""
    with short_switch_interval():
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report, then leave without running pytest's teardown
            try:
                found = sys.getswitchinterval()
                with short_switch_interval():
                    during = sys.getswitchinterval()
                os.write(write_end, repr((found, during, sys.getswitchinterval())).encode())
            finally:
                os._exit(0)
        os.close(write_end)
        os.waitpid(pid, 0)
        with os.fdopen(read_end) as report:
            found, during, after = ast.literal_eval(report.read())
    assert found == pytest.approx(default_interval, rel=0.05)
    assert during == pytest.approx(SWITCH_INTERVAL_S, rel=0.05)
    assert after == pytest.approx(default_interval, rel=0.05)
