"""#14.1 the pure batch model (postbox.consumer.batch): which records are done, blocked, retried,
dead-lettered, and which offset each partition may commit — every path, without Kafka or Redis."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import pytest

from postbox.consumer.batch import HELD_LIMIT, UNFINISHED, Batch, Fate, Position

P0, P1 = ("outbox.event.order", 0), ("outbox.event.order", 1)


def _batch(*parts: tuple[tuple[str, int], range]) -> Batch:
    return Batch.of((tp, o) for tp, offsets in parts for o in offsets)


def test_all_applied_commits_past_the_last_record():
    batch = _batch((P0, range(10, 14)))
    for o in range(10, 14):
        batch.finished(P0, o, Fate.APPLIED)
    position = batch.positions({P0})[P0]
    assert (position.commit, position.retry) == (14, None)


def test_duplicates_and_dead_letters_are_finished_like_applied_records():
    batch = _batch((P0, range(0, 3)))
    batch.finished(P0, 0, Fate.DUPLICATE)
    batch.finished(P0, 1, Fate.DEAD_LETTERED)
    batch.finished(P0, 2, Fate.APPLIED)
    assert batch.position(P0).commit == 3 and batch.position(P0).retry is None
    assert batch.counts() == {"pending": 0, "applied": 1, "duplicate": 1, "dead-lettered": 1, "held": 0}


def test_finish_all_is_finished_for_each_record_with_the_same_checks():
    batch = _batch((P0, range(0, 4)), (P1, range(7, 8)))
    batch.finish_all([(P0, 0), (P0, 1), (P1, 7)], Fate.APPLIED)
    batch.finish_all([(P0, 2)], Fate.DUPLICATE)
    assert [batch.fate(P0, o) for o in range(4)] == [Fate.APPLIED, Fate.APPLIED, Fate.DUPLICATE, Fate.PENDING]
    assert batch.position(P0).commit == 3 and batch.position(P1).commit == 8
    try:
        batch.finish_all([(P0, 3), (P0, 99)], Fate.APPLIED)
    except KeyError as exc:
        assert "99" in str(exc)
    else:
        raise AssertionError("a record not in the batch was accepted")
    try:
        batch.finish_all([(P0, 3)], Fate.HELD)
    except ValueError:
        pass
    else:
        raise AssertionError("HELD was accepted as a finished fate")


def test_a_transient_failure_stops_its_partition_there_and_nothing_after_it_runs():
    batch = _batch((P0, range(0, 5)))
    batch.finished(P0, 0, Fate.APPLIED)
    batch.finished(P0, 1, Fate.APPLIED)
    batch.block(P0, 2, "connection", "Redis unreachable")
    assert not batch.runnable(P0, 2) and not batch.runnable(P0, 4)
    position = batch.position(P0)
    assert position.commit == 2
    assert position.retry is not None and (position.retry.offset, position.retry.reason) == (2, "connection")


def test_the_lowest_block_wins():
    batch = _batch((P0, range(0, 6)))
    batch.block(P0, 4, "dlq", "not acknowledged")
    batch.block(P0, 1, "handler", "503")
    batch.block(P0, 3, "connection", "gone")
    batch.finished(P0, 0, Fate.APPLIED)
    assert batch.position(P0).commit == 1 and batch.get(P0).reason == "handler"


def test_an_unacknowledged_dead_letter_after_applied_successors_holds_the_commit_at_it():
    """#12.8's path: the effect of offset 1 failed, 2 and 3 were applied in the same script call,
    then the dead letter of 1 was not acknowledged: commit stays at 1 (2 and 3 come back as duplicates)."""
    batch = _batch((P0, range(0, 4)))
    for o in (0, 2, 3):
        batch.finished(P0, o, Fate.APPLIED)
    batch.block(P0, 1, "dlq", "MSG_TIMED_OUT")
    assert batch.position(P0).commit == 1


def test_partitions_are_independent():
    batch = _batch((P0, range(0, 3)), (P1, range(7, 9)))
    batch.block(P0, 0, "connection", "down")
    batch.finished(P1, 7, Fate.APPLIED)
    batch.finished(P1, 8, Fate.DUPLICATE)
    positions = batch.positions({P0, P1})
    assert positions[P0].commit == 0 and positions[P0].retry is not None
    assert positions[P1].commit == 9 and positions[P1].retry is None


def test_a_partition_revoked_mid_batch_is_not_committed():
    """Rebalance callbacks run inside consume(): a partition revoked before the batch finishes is
    gone from the assigned set, and the model commits nothing for it (its next owner re-reads)."""
    batch = _batch((P0, range(0, 2)), (P1, range(0, 2)))
    for tp in (P0, P1):
        for o in (0, 1):
            batch.finished(tp, o, Fate.APPLIED)
    assert set(batch.positions({P1})) == {P1}


def test_a_record_never_reported_finished_is_retried_not_skipped():
    batch = _batch((P0, range(0, 3)))
    batch.finished(P0, 0, Fate.APPLIED)
    batch.finished(P0, 2, Fate.APPLIED)
    position = batch.position(P0)
    assert position.commit == 1 and position.retry is not None and position.retry.reason == UNFINISHED


def test_only_records_of_the_batch_and_finished_fates_are_accepted():
    batch = _batch((P0, range(0, 1)))
    for bad in ((P0, 5, Fate.APPLIED), (P0, 0, Fate.PENDING)):
        try:
            batch.finished(*bad)
        except (KeyError, ValueError):
            continue
        raise AssertionError(f"accepted {bad}")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["applied", "duplicate", "dead-lettered", "pending", "block"]), min_size=1, max_size=30))
def test_the_commit_never_passes_a_record_that_is_not_finished(outcomes):
    """Property: whatever happens to each record, every offset below the commit is finished and
    before any block; a partition with a block or a pending record is always retried."""
    batch = _batch((P0, range(100, 100 + len(outcomes))))
    for offset, outcome in enumerate(outcomes, start=100):
        if outcome == "block":
            batch.block(P0, offset, "connection", "down")
        elif outcome != "pending" and not batch.covers(P0, offset):
            batch.finished(P0, offset, Fate(outcome))
    position = batch.position(P0)
    for offset in range(100, position.commit):
        assert batch.fate(P0, offset) is not Fate.PENDING and not batch.covers(P0, offset)
    unfinished = any(batch.fate(P0, o) is Fate.PENDING for o in range(100, 100 + len(outcomes)))
    assert (position.retry is not None) == (unfinished or P0 in batch.blocks)
    assert position.commit == 100 + len(outcomes) or position.retry is not None


def test_a_held_record_keeps_its_partition_flowing_and_the_commit_before_it():
    """#14.2 Cluster: offset 11's master is down (held); 12 and 13 live on other masters and
    apply. The partition is not blocked (no seek back), 11 rides into the next batch, and the
    commit stays at 11 until it is applied."""
    batch = _batch((P0, range(10, 14)))
    for o in (10, 12, 13):
        batch.finished(P0, o, Fate.APPLIED)
    batch.hold(P0, 11, "node-down", "Redis node 127.0.0.1:7001 is down")
    assert not batch.runnable(P0, 11) and not batch.covers(P0, 12)
    position = batch.position(P0)
    assert (position.commit, position.retry, position.hold) == (11, None, (11,))
    # the next batch: the held record first, then Kafka's next records
    carried = Batch.of([(P0, 11), *((P0, o) for o in range(14, 16))])
    carried.finished(P0, 11, Fate.APPLIED)
    carried.finished(P0, 14, Fate.APPLIED)
    carried.hold(P0, 15, "ordered", "an earlier event of its slot or order key is not applied yet")
    assert (carried.position(P0).commit, carried.position(P0).hold) == (15, (15,))



def test_held_records_applied_alone_commit_up_to_the_end_of_the_batch_they_came_from():
    """No new record in the partition: once the carried record applies, the commit moves past the
    records of the earlier batch that were already finished (not just past the carried one)."""
    batch = _batch((P0, range(20, 30)))
    for o in range(20, 30):
        batch.hold(P0, o, "node-down", "down") if o == 22 else batch.finished(P0, o, Fate.APPLIED)
    position = batch.position(P0)
    assert (position.commit, position.hold, batch.end(P0)) == (22, (22,), 30)
    carried = Batch.of([(P0, 22)], ends={P0: batch.end(P0)})
    carried.finished(P0, 22, Fate.APPLIED)
    assert carried.position(P0).commit == 30


def test_held_records_at_or_after_a_block_are_not_carried_they_are_read_again():
    batch = _batch((P0, range(0, 5)))
    batch.hold(P0, 1, "node-down", "down")
    batch.finished(P0, 2, Fate.APPLIED)
    batch.block(P0, 3, "dlq", "not acknowledged")
    batch.hold(P0, 4, "node-down", "down")
    batch.finished(P0, 0, Fate.APPLIED)
    position = batch.position(P0)
    assert position.commit == 1 and position.retry is not None and position.retry.offset == 3
    assert position.hold == (1,)  # 4 comes back with the re-read from 3


def test_more_held_records_than_the_limit_block_the_partition_at_the_first():
    """Memory stays bounded during a long outage: past the limit the partition pauses and is
    re-read from its first held record (the behaviour without holding)."""
    batch = Batch.of(((P0, o) for o in range(0, 6)), held_limit=2)
    for o in range(0, 6):
        batch.hold(P0, o, "node-down", "down") if o % 2 else batch.finished(P0, o, Fate.APPLIED)
    position = batch.position(P0)
    assert position.commit == 1 and position.retry is not None
    assert (position.retry.offset, position.retry.reason, position.hold) == (1, HELD_LIMIT, ())


def test_only_pending_records_can_be_held():
    batch = _batch((P0, range(0, 2)))
    batch.finished(P0, 0, Fate.APPLIED)
    for offset in (0, 7):
        try:
            batch.hold(P0, offset, "node-down", "down")
        except KeyError:
            continue
        raise AssertionError(f"held {offset}")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["applied", "duplicate", "held", "pending", "block"]), min_size=1, max_size=30), st.integers(1, 5))
def test_the_commit_never_passes_a_held_record_and_carried_ones_precede_any_retry(outcomes, limit):
    batch = Batch.of(((P0, o) for o in range(0, len(outcomes))), held_limit=limit)
    for offset, outcome in enumerate(outcomes):
        if outcome == "block":
            batch.block(P0, offset, "connection", "down")
        elif outcome == "held":
            batch.hold(P0, offset, "node-down", "down")
        elif outcome != "pending":
            batch.finished(P0, offset, Fate(outcome))
    position = batch.position(P0)
    assert all(batch.fate(P0, o) in (Fate.APPLIED, Fate.DUPLICATE) for o in range(0, position.commit))
    assert all(batch.fate(P0, o) is Fate.HELD for o in position.hold)
    if position.retry is not None:
        assert all(o < position.retry.offset for o in position.hold)
    else:  # nothing re-read: every record not finished is carried
        assert set(position.hold) == {o for o in range(len(outcomes)) if batch.fate(P0, o) is Fate.HELD}


def test_finish_every_marks_the_whole_batch_and_refuses_a_record_with_a_fate():
    """#14.2 settle: the common batch (every record applied) is marked at once; the commit is
    past every partition's last record. A batch where a record already has a fate (dead-lettered
    at launch, held, a duplicate) is refused whole, so no record's fate is overwritten. Shown to
    fail with the refusal removed (the dead-lettered record became applied)."""
    batch = _batch((P0, range(5, 8)), (P1, range(0, 2)))
    batch.finish_every(Fate.APPLIED)
    assert batch.positions({P0, P1}) == {P0: Position(8), P1: Position(2)}
    assert batch.counts()["applied"] == len(batch) == 5
    for mark in (lambda b: b.finished(P1, 1, Fate.DEAD_LETTERED), lambda b: b.hold(P0, 6, "node-down", "down")):
        mixed = _batch((P0, range(5, 8)), (P1, range(0, 2)))
        mark(mixed)
        with pytest.raises(ValueError):
            mixed.finish_every(Fate.APPLIED)
        assert mixed.counts()["applied"] == 0
    with pytest.raises(ValueError):
        _batch((P0, range(0, 1))).finish_every(Fate.HELD)
