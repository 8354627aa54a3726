"""`postbox doctor`'s node lines: which Kafka broker or Redis node is missing, from what the engines report."""

from __future__ import annotations

from hypothesis import given, strategies as st

from postbox.incident.doctor_nodes import kafka_nodes, redis_replication, sentinel_view

BROKERS = {1: "127.0.0.1:9092", 2: "127.0.0.1:9094", 3: "127.0.0.1:9096"}


def test_every_partition_in_sync_is_ok_and_lists_every_broker_and_the_controller():
    verdict = kafka_nodes(BROKERS, 2, {"outbox.event.order": [([1, 2, 3], [1, 2, 3]), ([2, 3, 1], [2, 3, 1])]})
    assert verdict.status == "ok" and verdict.fix is None
    assert "3 broker(s): 1 127.0.0.1:9092, 2 127.0.0.1:9094, 3 127.0.0.1:9096; controller 2" in verdict.detail


def test_a_broker_out_of_the_isr_is_named_with_its_partition_count():
    verdict = kafka_nodes({1: BROKERS[1], 3: BROKERS[3]}, 1, {
        "outbox.event.order": [([1, 2, 3], [1, 3]), ([2, 3, 1], [3, 1]), ([3, 1, 2], [3, 1, 2])]})
    assert verdict.status == "warn"
    assert "2 outbox partition(s) under-replicated, out of sync: broker 2 (2 partition(s))" in verdict.detail
    assert "start the missing broker" in (verdict.fix or "")


@given(st.lists(st.tuples(st.sets(st.integers(1, 5), min_size=1), st.sets(st.integers(1, 5))), max_size=12))
def test_the_verdict_is_ok_exactly_when_no_replica_is_missing_from_its_isr(parts):
    topics = {"outbox.event.t": [(sorted(replicas), sorted(isrs & replicas)) for replicas, isrs in parts]}
    verdict = kafka_nodes(BROKERS, None, topics)
    under = sum(1 for replicas, isrs in parts if replicas - isrs)
    assert (verdict.status == "ok") == (under == 0)
    if under:
        assert f"{under} outbox partition(s) under-replicated" in verdict.detail


def test_a_primary_lists_each_replica_with_its_lag_in_bytes():
    info = {"role": "master", "master_repl_offset": 1500,
            "slave0": {"ip": "127.0.0.1", "port": 6380, "state": "online", "offset": 1200, "lag": 0}}
    verdict = redis_replication(info, "redis://127.0.0.1:6379/0")
    assert verdict.status == "ok"
    assert "primary with 1 replica(s): 127.0.0.1:6380 online lag 300 B" in verdict.detail


def test_a_replica_still_syncing_is_a_warning_with_the_fix():
    info = {"role": "master", "master_repl_offset": 10,
            "slave0": {"ip": "127.0.0.1", "port": 6380, "state": "wait_bgsave", "offset": 0}}
    verdict = redis_replication(info, "redis://127.0.0.1:6379/0")
    assert verdict.status == "warn" and "a failover may lose applies" in (verdict.fix or "")


def test_a_url_pointing_at_a_replica_fails_and_points_at_the_sentinels():
    verdict = redis_replication({"role": "slave", "master_host": "127.0.0.1", "master_port": 6379}, "redis://127.0.0.1:6380/0")
    assert verdict.status == "fail" and "refuses writes" in verdict.detail
    assert "redis+sentinel://" in (verdict.fix or "")


def test_a_primary_without_replicas_says_a_failover_has_nowhere_to_go():
    verdict = redis_replication({"role": "master", "master_repl_offset": 0}, "redis://127.0.0.1:6379/0")
    assert verdict.status == "ok" and "without replicas" in verdict.detail


SENTINELS = ["127.0.0.1:26379", "127.0.0.1:26380", "127.0.0.1:26381"]
UP = [{"ip": "127.0.0.1", "port": 6380, "flags": "slave"}]


def test_three_sentinels_agreeing_with_a_replica_up_are_ok():
    verdict = sentinel_view({s: ("127.0.0.1", 6379) for s in SENTINELS}, UP, "postbox")
    assert verdict.status == "ok"
    assert verdict.detail == "3 of 3 Sentinel(s) name 127.0.0.1:6379; replicas: 127.0.0.1:6380 (slave)"


def test_one_silent_sentinel_warns_two_silent_fail_for_want_of_a_majority():
    one = sentinel_view({SENTINELS[0]: ("127.0.0.1", 6379), SENTINELS[1]: ("127.0.0.1", 6379), SENTINELS[2]: None}, UP, "postbox")
    assert one.status == "warn" and "silent: 127.0.0.1:26381" in one.detail
    two = sentinel_view({SENTINELS[0]: ("127.0.0.1", 6379), SENTINELS[1]: None, SENTINELS[2]: None}, UP, "postbox")
    assert two.status == "fail" and "no majority for a failover" in two.detail


def test_sentinels_naming_different_primaries_fail():
    verdict = sentinel_view({SENTINELS[0]: ("127.0.0.1", 6379), SENTINELS[1]: ("127.0.0.1", 6380),
                             SENTINELS[2]: ("127.0.0.1", 6380)}, UP, "postbox")
    assert verdict.status == "fail" and "disagree on the primary" in verdict.detail


def test_a_replica_the_sentinels_see_down_warns():
    verdict = sentinel_view({s: ("127.0.0.1", 6379) for s in SENTINELS},
                            [{"ip": "127.0.0.1", "port": 6380, "flags": "disconnected,s_down,slave"}], "postbox")
    assert verdict.status == "warn" and "s_down" in verdict.detail
