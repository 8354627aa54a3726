"""#15.1 time windows: the bounded window run's book-keeping (pure parts; the run itself is driven
against the stack in tests/integration/test_consumer_window.py)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from postbox.consumer.batch import Batch, Fate
from postbox.consumer.window import Span, Tally, WindowAssignment
from postbox.incident import window as plan
from postbox.incident.tail import End, Start

TP = ("outbox.event.w", 0)


def test_a_record_applied_then_redelivered_counts_once_as_applied():
    tally = Tally(Span(*TP, start=10, end=13))
    first = Batch.of([(TP, 10), (TP, 11), (TP, 12)])
    first.finished(TP, 10, Fate.APPLIED)
    first.finished(TP, 12, Fate.APPLIED)  # 11's dead letter was not acknowledged: the partition stops at 11
    first.block(TP, 11, "dlq", "timeout")
    tally.saw(first, first.position(TP))
    assert (tally.applied, tally.duplicate, tally.dead_lettered, tally.counted_to) == (1, 0, 0, 11)

    retry = Batch.of([(TP, 11), (TP, 12)])
    retry.finished(TP, 11, Fate.DEAD_LETTERED)
    retry.finished(TP, 12, Fate.DUPLICATE)  # the marker written by the first batch
    tally.saw(retry, retry.position(TP))
    assert (tally.applied, tally.duplicate, tally.dead_lettered, tally.counted_to) == (2, 0, 1, 13)


def test_records_past_the_end_are_never_counted():
    tally = Tally(Span(*TP, start=0, end=2))
    batch = Batch.of([(TP, 0), (TP, 1), (TP, 2)])
    for offset in (0, 1, 2):
        batch.finished(TP, offset, Fate.APPLIED)
    tally.saw(batch, batch.position(TP))
    assert tally.applied == 2


def test_complete_needs_every_record_read_finished_and_the_end_seen():
    tally = Tally(Span(*TP, start=0, end=10))
    assert not tally.complete(None)
    assert tally.complete(10)
    tally.last_read = 7  # offsets 8 and 9 are a gap (compaction, a transaction marker)
    assert not tally.complete(8)  # the client has not read past the end yet
    tally.read_past_end = True
    assert not tally.complete(7)  # record 7 is not finished
    assert tally.complete(8)


def test_the_window_client_joins_no_group_and_cannot_commit_for_it():
    conf = WindowAssignment([]).configure({"group.id": "billing", "group.instance.id": "host-billing-0", "client.id": "c"})
    assert conf["group.id"] != "billing" and "group.instance.id" not in conf
    assert conf["enable.partition.eof"] is True


def test_an_end_beyond_the_high_watermark_is_clamped_and_said():
    assert plan._end_offset(End("offset", 500), 10, 120, None) == (120, ["end offset 500 is beyond the high watermark: clamped to 120"])
    assert plan._end_offset(End("offset", 50), 10, 120, None) == (50, [])
    stop, notes = plan._end_offset(End("timestamp", 1), 10, 120, 120)
    assert stop == 120 and "ends at the high watermark 120" in notes[0]


def test_a_start_before_the_earliest_retained_record_is_said():
    first, notes = plan._start_offset(Start("offset", 3), 10, 120, 120, None, None)
    assert first == 10 and "no longer retained" in notes[0]
    first, notes = plan._start_offset(Start("timestamp", 1), 10, 120, 120, 10, None)
    assert first == 10 and "earliest retained record (offset 10)" in notes[0]
    assert plan._start_offset(Start(plan.COMMITTED), 10, 120, 120, None, 42) == (42, [])
    assert plan._start_offset(Start("last", 5), 10, 120, 100, None, None) == (95, [])


@pytest.mark.parametrize(("start", "until"), [("100", "50"), ("2026-01-02T00:00:00Z", "2026-01-01T00:00:00Z"), ("1h", "2h")])
def test_an_until_before_the_from_is_refused(start, until):
    now = datetime(2026, 6, 1, tzinfo=timezone.utc)
    with pytest.raises(ValueError, match="--until .* is before --from"):
        plan.check_order(plan.parse_window_start(start, now), plan.parse_window_end(until, now))
