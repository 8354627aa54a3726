"""The replay plan's view of an aggregate's later events (postbox.incident.replay_order)."""

from __future__ import annotations

from postbox.incident.replay_order import LATER_SCAN_LIMIT, PartitionTail, hold_reason, later_events


def test_later_events_leave_out_earlier_offsets_other_keys_and_events_replayed_together() -> None:
    tail = PartitionTail(start=11, end=20, by_key={b"A": [(11, "e2"), (12, "e1"), (15, "e5")], b"B": [(13, "e3")]})
    assert later_events(tail, b"A", 10, skip_ids={"e1"}) == [(11, "e2"), (15, "e5")]  # e1: a copy of the replayed event
    assert later_events(tail, b"A", 11, skip_ids={"e1", "e5"}) == []  # e5 is replayed in the same run, after it
    assert later_events(tail, b"C", 10, skip_ids=set()) == []


def test_the_reason_names_the_first_few_and_counts_the_rest() -> None:
    later = [(o, f"e{o}") for o in range(1, 6)]
    reason = hold_reason(later, "outbox.event.order", 0, "42")
    assert reason.startswith("5 later event(s) of aggregate '42' are already in outbox.event.order[0]: e1 (offset 1), e2 (offset 2), e3 (offset 3) and 2 more")


def test_a_tail_longer_than_the_limit_is_not_complete() -> None:
    assert PartitionTail(0, LATER_SCAN_LIMIT).complete
    assert not PartitionTail(0, LATER_SCAN_LIMIT + 1).complete
