"""The decision that tells the replication slot that confirmed retention's checkpoints from a
replaced one (postbox.outbox.slot_identity), and what retention says when it refuses."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from postbox.outbox.slot_identity import GRANT, Identity, judge, replaced_reason, stamp_refused_reason, stats_lost_reason

STAMP = datetime(2026, 3, 2, 4, 0, 0, 123456, tzinfo=UTC)


def test_the_slot_carrying_the_checkpoints_stamp_is_the_same_slot() -> None:
    assert judge(STAMP, STAMP) is Identity.SAME


def test_a_slot_without_a_stamp_after_checkpoints_with_one_is_replaced() -> None:
    """A new slot's statistics start empty; so do a crashed server's (the safe side)."""
    assert judge(STAMP, None) is Identity.REPLACED


def test_a_slot_with_another_stamp_is_replaced_even_a_microsecond_apart() -> None:
    assert judge(STAMP, STAMP + timedelta(microseconds=1)) is Identity.REPLACED
    assert judge(STAMP, STAMP - timedelta(days=1)) is Identity.REPLACED


def test_without_stamped_checkpoints_the_slot_is_stamped_whatever_it_carries() -> None:
    assert judge(None, None) is Identity.UNSTAMPED
    assert judge(None, STAMP) is Identity.UNSTAMPED


def test_the_replaced_slot_refusal_names_the_slot_both_stamps_and_the_republish() -> None:
    reason = replaced_reason("orders_slot", STAMP, None, " --pipeline orders")
    assert "replication slot orders_slot is not the one that confirmed retention's checkpoints" in reason
    assert "stamp none" in reason and STAMP.isoformat() in reason and "nothing was dropped" in reason
    assert "`postbox db republish --pipeline orders`" in reason and "docs/recovery.md" in reason


def test_without_the_privilege_the_refusal_gives_the_grant_to_run() -> None:
    reason = stamp_refused_reason("postbox_outbox")
    assert "postbox_outbox" in reason and "nothing was dropped" in reason and reason.endswith(GRANT)
    assert GRANT == "GRANT EXECUTE ON FUNCTION pg_catalog.pg_stat_reset_replication_slot(text) TO postbox_owner"


def test_a_slot_whose_stamp_went_with_every_statistic_after_the_checkpoints_is_unknown() -> None:
    """Crash recovery discards all statistics (and sets the cluster-wide reset time): the slot may
    be the same one, but nothing proves it."""
    assert judge(STAMP, None, STAMP + timedelta(hours=3)) is Identity.STATS_LOST
    assert judge(STAMP, None, STAMP - timedelta(hours=3)) is Identity.REPLACED  # discarded before: a new slot
    assert judge(STAMP, STAMP, STAMP + timedelta(hours=3)) is Identity.SAME  # reset shared stats only
    assert judge(STAMP, STAMP + timedelta(seconds=1), STAMP + timedelta(hours=3)) is Identity.REPLACED


def test_the_lost_statistics_refusal_names_when_and_both_ways_out() -> None:
    lost = STAMP + timedelta(hours=3)
    reason = stats_lost_reason("orders_slot", STAMP, lost, " --pipeline orders")
    assert "orders_slot" in reason and f"discarded its statistics at {lost.isoformat()}" in reason
    assert "`postbox db retention --trust-slot --pipeline orders`" in reason
    assert "`postbox db republish --pipeline orders`" in reason and "nothing was dropped" in reason
