"""A window beside its group: refused where it could apply an aggregate's events out of order.

Found in review: a window started ahead of a lagging group applied later events of an aggregate
before the group applied the earlier ones (final status `placed` after `shipped`). The rule is
about the window's START only: a window that starts at or before the group's committed offset
applies in order, and so does the group, each meeting the other's markers, however far past the
group's position the window ends (the model property below drives both over one log).
Before this rule a window over offsets a running group was consuming was refused too (wrongly:
the catch-up `--from committed --until end` beside the live group could not run), and a partition
without a committed offset said nothing of the group's offset reset.
"""

from __future__ import annotations

import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from postbox.consumer.window import Span
from postbox.errors import UnsafeReplayError
from postbox.incident.window import WindowRow
from postbox.incident.window_order import ahead_of_group, refuse_or_warn, window_ahead_error

T = "outbox.event.order"


def row(partition: int, start: int, end: int, low: int = 0, high: int = 100) -> WindowRow:
    return WindowRow(Span(T, partition, start, end), low, high)


def test_a_window_starting_at_or_before_the_groups_position_is_safe_wherever_it_ends() -> None:
    assert ahead_of_group([row(0, 0, 40)], {(T, 0): 40}) == []  # the group's past
    assert ahead_of_group([row(0, 10, 20)], {(T, 0): 50}) == []
    assert ahead_of_group([row(0, 40, 100)], {(T, 0): 40}) == []  # from committed to the end: a catch-up
    assert ahead_of_group([row(0, 0, 100)], {(T, 0): 40}) == []  # over what the group has yet to consume


def test_a_window_starting_ahead_of_the_committed_offset_names_the_partition_both_offsets_and_the_gap() -> None:
    (ahead,) = ahead_of_group([row(0, 30, 60)], {(T, 0): 25})
    assert (ahead.topic, ahead.partition, ahead.start, ahead.position, ahead.committed) == (T, 0, 30, 25, 25)
    text = ahead.describe()
    assert text.startswith(f"{T}[0]: the window starts at offset 30, ahead of the group's committed offset 25")
    assert "offsets 25..29 (5 record(s))" in text


def test_without_a_committed_offset_the_group_begins_at_the_earliest_record_under_earliest() -> None:
    assert ahead_of_group([row(1, 5, 9, low=5)], {}) == []  # the window starts at the beginning
    (ahead,) = ahead_of_group([row(1, 7, 9, low=5)], {}, offset_reset="earliest")
    assert (ahead.position, ahead.committed) == (5, None)
    assert "no committed offset" in ahead.describe() and "auto.offset.reset=earliest" in ahead.describe()
    assert "offsets 5..6 (2 record(s))" in ahead.describe()


def test_without_a_committed_offset_under_latest_it_is_refused_too_and_says_why() -> None:
    # where a member began (the end of the partition when it was assigned) is not in Kafka, and
    # the window cannot read the members' own setting: the safe reading is the earliest record
    (ahead,) = ahead_of_group([row(1, 7, 9, low=5)], {}, offset_reset="latest")
    assert ahead.position == 5
    assert "auto.offset.reset=latest" in ahead.describe() and "not recorded" in ahead.describe()
    assert ahead_of_group([row(1, 5, 9, low=5)], {}, offset_reset="latest") == []


def test_a_committed_offset_deleted_by_retention_counts_from_the_earliest_retained_record() -> None:
    (ahead,) = ahead_of_group([row(0, 30, 60, low=20)], {(T, 0): 10})
    assert ahead.position == 20 and "offsets 20..29 (10 record(s))" in ahead.describe()
    assert ahead_of_group([row(0, 20, 60, low=20)], {(T, 0): 10}) == []


def test_an_empty_window_is_never_a_problem() -> None:
    assert ahead_of_group([row(0, 30, 30)], {(T, 0): 0}) == []


def test_the_refusal_names_every_partition_ahead_and_the_fix() -> None:
    ahead = ahead_of_group([row(0, 30, 60), row(1, 8, 9)], {(T, 0): 25, (T, 1): 2})
    error = window_ahead_error("billing", ahead, members=2)
    assert isinstance(error, UnsafeReplayError)
    assert error.message.startswith("refused to run the window of group billing: it starts ahead of the group on 2 partition(s)")
    assert f"{T}[0]: the window starts at offset 30, ahead of the group's committed offset 25" in error.message
    assert f"{T}[1]: the window starts at offset 8, ahead of the group's committed offset 2" in error.message
    assert error.fix is not None and "wait for the group to catch up" in error.fix and "--force" in error.fix
    assert "postbox lag --group billing" in error.fix and "--from committed" in error.fix
    stopped = window_ahead_error("billing", ahead, members=0)
    assert stopped.fix is not None and "start the group" in stopped.fix


def test_force_runs_it_and_logs_a_warning_naming_the_partitions(caplog: pytest.LogCaptureFixture) -> None:
    ahead = ahead_of_group([row(0, 30, 60), row(1, 7, 9, low=5)], {(T, 0): 25})
    with pytest.raises(UnsafeReplayError):
        refuse_or_warn("billing", ahead, members=1, force=False)
    with caplog.at_level(logging.WARNING, logger="postbox.consumer"):
        refuse_or_warn("billing", ahead, members=1, force=True)
    (record,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "ahead of its group" in record.getMessage()
    fields = vars(record)["postbox_fields"]  # the log line's key=value fields (logs.log_event)
    assert fields["group"] == "billing" and fields["partitions"] == f"{T}[0]@30>25,{T}[1]@7>none"
    refuse_or_warn("billing", [], members=1, force=False)  # nothing ahead: nothing said, nothing raised


# -- the model: the group and the window over one log, meeting each other's markers ----------------


def _run(log: list[int], low: int, position: int, start: int, end: int, turns: list[bool], *, past_applied: bool = True) -> list[list[int]]:
    """Per aggregate, the offsets applied, in the order applied. The group resumes at ``position``;
    before it, it applied every record from ``low`` (``past_applied``) or skipped them (it began
    there under auto.offset.reset=latest). From there it and the window each go in order,
    interleaved by ``turns``, and whoever reaches an event second meets its marker."""
    applied = set(range(low, position)) if past_applied else set()
    order: list[list[int]] = [[] for _ in range(3)]
    for offset in sorted(applied):
        order[log[offset]].append(offset)
    cursors, ends = {"group": position, "window": start}, {"group": len(log), "window": end}
    picks = iter(turns)
    while any(cursors[w] < ends[w] for w in cursors):
        who = "window" if next(picks, True) else "group"
        if cursors[who] >= ends[who]:
            who = "group" if who == "window" else "window"
        offset = cursors[who]
        cursors[who] += 1
        if offset not in applied:
            applied.add(offset)
            order[log[offset]].append(offset)
    return order


@settings(max_examples=400, deadline=None)
@given(data=st.data(), log=st.lists(st.integers(0, 2), min_size=1, max_size=30))
def test_model_a_window_the_rule_allows_never_applies_an_aggregate_out_of_order(data: st.DataObject, log: list[int]) -> None:
    high = len(log)
    low = data.draw(st.integers(0, high))
    committed = data.draw(st.one_of(st.none(), st.integers(0, high)))
    reset = data.draw(st.sampled_from(["earliest", "latest"]))
    start = data.draw(st.integers(low, high))
    end = data.draw(st.integers(start, high))
    turns = data.draw(st.lists(st.booleans(), max_size=2 * high))
    if committed is not None:
        position, past_applied = max(low, committed), True
    elif reset == "earliest":
        position, past_applied = low, True
    else:  # it began at the end of the partition of when it was assigned: anywhere, Kafka does not say
        position, past_applied = data.draw(st.integers(low, high)), False
    refused = ahead_of_group([row(0, start, end, low=low, high=high)], {(T, 0): committed} if committed is not None else {},
                             offset_reset=reset)
    order = _run(log, low, position, start, end, turns, past_applied=past_applied)
    skipped = set() if past_applied else set(range(low, position))  # history the group never applies (documented)
    if not refused:
        assert all([o for o in seq if o not in skipped] == sorted(o for o in seq if o not in skipped) for seq in order), \
            (order, committed, position, start, end)


def test_model_the_window_ahead_of_a_stopped_group_reorders_the_aggregate() -> None:
    """The reproduction, in the model: the group stopped at 1 (`placed` at offset 1 not applied),
    the window from 2 applies `shipped`, then the group resumes and applies `placed` after it."""
    log = [0, 0, 0]  # created, placed, shipped of one order
    assert ahead_of_group([row(0, 2, 3)], {(T, 0): 1})
    assert _run(log, 0, 1, 2, 3, [True, False, False]) == [[0, 2, 1], [], []]
