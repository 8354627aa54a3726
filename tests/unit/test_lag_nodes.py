"""`postbox lag`'s node column: which broker leads each partition, and the replicas out of sync."""

from __future__ import annotations

from postbox.incident.lag import PartitionLag


def _part(**kw) -> PartitionLag:
    return PartitionLag("outbox.event.order", 0, 10, 12, 0, 2, **kw)


def test_a_fully_replicated_partition_shows_its_leader():
    assert _part(leader=2, replicas=(1, 2, 3), isrs=(2, 3, 1)).nodes() == "leader 2"


def test_a_replica_out_of_sync_is_shown_with_the_in_sync_set():
    part = _part(leader=2, replicas=(1, 2, 3), isrs=(2, 3))
    assert part.nodes() == "leader 2, in sync 2,3 of 1,2,3"
    assert part.as_dict(0)["isr"] == [2, 3] and part.as_dict(0)["replicas"] == [1, 2, 3]


def test_a_partition_without_a_leader_says_so():
    assert _part(leader=None, replicas=(1,), isrs=()).nodes() == "no leader"
