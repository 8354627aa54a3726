"""A window beside its group: refused where it could apply an aggregate's events out of order.

Found in review: a window started ahead of a lagging group applied later events of an aggregate
before the group applied the earlier ones (final status `placed` after `shipped`), and a window
over the records a running group is consuming raced it. Before the check every such window ran.
"""

from __future__ import annotations

from postbox.consumer.window import Span
from postbox.incident.window import WindowRow, group_position_problems

T = "outbox.event.order"


def row(partition: int, start: int, end: int, low: int = 0) -> WindowRow:
    return WindowRow(Span(T, partition, start, end), low, 100)


def test_a_window_in_the_groups_past_is_safe_running_or_not() -> None:
    assert group_position_problems([row(0, 0, 40)], {(T, 0): 40}, members=2) == []
    assert group_position_problems([row(0, 10, 20)], {(T, 0): 50}, members=0) == []


def test_a_window_starting_ahead_of_the_group_is_refused_naming_what_it_skips() -> None:
    (problem,) = group_position_problems([row(0, 30, 60)], {(T, 0): 25}, members=0)
    assert problem.startswith(f"{T}[0]: the group has not applied offsets 25..29 yet (5 record(s))")


def test_a_group_without_offsets_counts_from_the_earliest_record() -> None:
    assert group_position_problems([row(1, 5, 9, low=5)], {}, members=0) == []  # the window starts at the beginning
    (problem,) = group_position_problems([row(1, 7, 9, low=5)], {}, members=0)
    assert "offsets 5..6" in problem


def test_a_window_over_what_a_running_group_consumes_is_refused_a_stopped_groups_is_not() -> None:
    (problem,) = group_position_problems([row(0, 0, 60)], {(T, 0): 40}, members=1)
    assert "1 member(s) are consuming from offset 40, inside the window (0..59)" in problem
    assert group_position_problems([row(0, 0, 60)], {(T, 0): 40}, members=0) == []


def test_an_empty_window_is_never_a_problem() -> None:
    assert group_position_problems([row(0, 30, 30)], {(T, 0): 0}, members=3) == []
