"""The fault harness's waits for applied events (``FaultRun._wait_applied``) give up at
:meth:`tests.faults.stall.Drain.deadline`: a fixed timeout failed the mixed scenario on a loaded
host (load 15-20) while its consumer was still draining the backlog of a two-minute Kafka restart
at ~90 events/s — a slow host, not a stuck pipeline. The wait now goes on while events are being
applied, up to three times its timeout, and a stall still fails at its timeout."""

from __future__ import annotations

import time

from tests.faults.stall import Drain


def test_a_wait_that_saw_nothing_applied_gives_up_at_its_timeout() -> None:
    drain = Drain(started=100.0, count_at_start=5, last_count=5)
    assert drain.deadline(60) == 160.0


def test_a_wait_whose_count_last_grew_long_before_its_timeout_gives_up_at_the_timeout() -> None:
    drain = Drain(started=100.0, count_at_start=5, last_count=9, last_growth=110.0)
    assert drain.deadline(60, stall_s=30) == 160.0


def test_events_still_being_applied_at_the_timeout_extend_the_wait_by_the_stall_window() -> None:
    drain = Drain(started=100.0, count_at_start=5, last_count=900, last_growth=158.0)
    assert drain.deadline(60, stall_s=30) == 188.0


def test_the_wait_never_goes_past_its_cap_however_long_the_count_grows() -> None:
    drain = Drain(started=100.0, count_at_start=5, last_count=90_000, last_growth=400.0)
    assert drain.deadline(60, stall_s=30, most=3) == 280.0


def test_saw_moves_the_deadline_only_when_the_count_grows() -> None:
    drain = Drain(started=time.monotonic(), count_at_start=0, last_count=0)
    drain.saw(0)
    assert drain.last_growth is None
    drain.saw(3)
    grown = drain.last_growth
    assert grown is not None and drain.deadline(1, stall_s=30, most=100) == grown + 30
    drain.saw(3)
    assert drain.last_growth == grown
