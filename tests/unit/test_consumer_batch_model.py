"""#14.1 the pure batch model (postbox.consumer.batch): which records are done, blocked, retried,
dead-lettered, and which offset each partition may commit — every path, without Kafka or Redis."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from postbox.consumer.batch import UNFINISHED, Batch, Fate

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
    assert batch.counts() == {"pending": 0, "applied": 1, "duplicate": 1, "dead-lettered": 1}


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
