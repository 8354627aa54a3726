"""The consumer's short thread switch interval (#14.2) is counted across runtimes in one process:
the first to start sets it, the last to stop restores what the first found, and a host running
with a shorter interval keeps it."""

from __future__ import annotations

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
