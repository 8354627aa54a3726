"""#15.1: which checks make `postbox lag --max-lag N` / `--max-slot-lag B` trip, each named.

The rule on the reports `postbox lag` reads (groups, slot, connector, shaped as
``pipeline_state`` returns them); tests/integration/test_cdc_outage_alerts.py drives the real
command through a Connect outage and a paused connector."""

from __future__ import annotations

from postbox.incident.lag import GroupLag, PartitionLag, max_lag_alerts

RUNNING = {"name": "postbox-outbox", "state": "RUNNING", "worker": "w:8083",
           "tasks": [{"id": 0, "state": "RUNNING", "worker": "w:8083", "error": None}]}
ACTIVE = {"name": "postbox_outbox", "state": "active", "lag_bytes": 4096, "wal_status": "reserved", "safe_wal_size": 10**9}


def groups(*lags: int) -> list[GroupLag]:
    return [GroupLag(f"g{i}", "STABLE", 1, [PartitionLag("outbox.event.order", 0, 0, lag, 0, lag)]) for i, lag in enumerate(lags)]


def test_a_healthy_pipeline_within_the_thresholds_trips_nothing():
    assert max_lag_alerts(groups(0, 5), {"slot": ACTIVE, "connector": RUNNING}, 5, max_slot_lag=4096) == []


def test_each_check_names_itself():
    failed = {**RUNNING, "state": "RUNNING", "tasks": [{"id": 0, "state": "FAILED", "worker": "w", "error": "boom"}]}
    lost = {**ACTIVE, "wal_status": "lost"}
    alerts = max_lag_alerts(groups(0, 6), {"slot": lost, "connector": failed}, 5, max_slot_lag=100)
    assert alerts == [
        "group g1: lag 6 > --max-lag 5",
        "connector postbox-outbox: RUNNING (task 0 FAILED): events are not read from the database into Kafka",
        "replication slot postbox_outbox: wal_status lost: events may never be published",
        "replication slot postbox_outbox: lag 4,096 bytes > --max-slot-lag 100: Debezium is not confirming the WAL",
    ]


def test_a_cdc_outage_trips_even_with_every_group_caught_up():
    down = {"name": "postbox-outbox", "state": "unreachable", "error": "Kafka Connect is unreachable", "tasks": []}
    inactive = {**ACTIVE, "state": "inactive"}
    alerts = max_lag_alerts(groups(0), {"slot": inactive, "connector": down}, 1000)
    assert [a.split(":")[0] for a in alerts] == ["connector postbox-outbox", "replication slot postbox_outbox"]
    assert "inactive" in alerts[1] and "unreachable (Kafka Connect is unreachable)" in alerts[0]


def test_slot_lag_alone_is_checked_only_when_asked():
    assert max_lag_alerts(groups(0), {"slot": ACTIVE, "connector": RUNNING}, 0) == []
    assert len(max_lag_alerts(groups(0), {"slot": ACTIVE, "connector": RUNNING}, None, max_slot_lag=0)) == 1
