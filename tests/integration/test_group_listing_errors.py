"""With Kafka unreachable, or a group listing that a broker refused, the commands that list the
consumer groups say so: the exporter's ``postbox_exporter_kafka_up`` is 0, ``postbox lag`` exits
non-zero with the error, and ``trace`` reports "applied by" as unknown with the reason, instead
of an empty list that reads as "no group". Kafka is a closed port here (nothing of the shared
stack is stopped); the slot and the connector are the stack's."""

from __future__ import annotations

from concurrent.futures import Future
from datetime import timedelta
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import ListConsumerGroupsResult
from prometheus_client.parser import text_string_to_metric_families

from postbox.incident.trace import trace_event
from postbox.kafka_cluster import Kafka
from tests.integration.incident_support import run_cli
from tests.support.consumers import create_topic, json_event, produce
from tests.support.redis_servers import free_port

pytestmark = pytest.mark.integration

FAST = {"POSTBOX_KAFKA_TIMEOUT": "3"}


def test_the_exporter_reports_kafka_down_when_kafka_is_unreachable():
    done = run_cli("exporter", "--once", "--kafka-bootstrap", f"127.0.0.1:{free_port()}", env=FAST)
    assert done.returncode == 0, done.stderr
    samples = {s.name: s.value for f in text_string_to_metric_families(done.stdout) for s in f.samples}
    assert samples["postbox_exporter_kafka_up"] == 0
    assert "postbox_exporter_kafka_up 0.0" in done.stdout


def test_lag_without_a_group_exits_non_zero_with_the_error():
    port = free_port()
    done = run_cli("lag", "--kafka-bootstrap", f"127.0.0.1:{port}", env=FAST)
    assert done.returncode == 1
    assert f"Kafka at 127.0.0.1:{port} did not answer" in done.stderr and "fix:" in done.stderr


class _ListingRefused:
    """The real AdminClient, but its group listing comes back with a broker's error."""

    def __init__(self, admin: Any) -> None:
        self.admin = admin

    def __getattr__(self, name: str) -> Any:
        return getattr(self.admin, name)

    def list_consumer_groups(self, request_timeout: float | None = None) -> Future:
        future: Future = Future()
        future.set_result(ListConsumerGroupsResult(valid=[], errors=[KafkaException(KafkaError(KafkaError._TRANSPORT))]))
        return future


def test_trace_says_who_applied_it_is_unknown_when_the_groups_cannot_be_listed(settings, unique):
    topic = f"outbox.event.gl{unique}"
    create_topic(settings.kafka_bootstrap, topic, 1)
    record = json_event(f"gl{unique}", "a", "Counted", 1, partition=0)
    produce(settings.kafka_bootstrap, topic, [record])
    event_id = dict((k, v) for k, v in record[2])["id"].decode()
    with Kafka(settings.kafka_bootstrap) as kafka:
        kafka._admin = _ListingRefused(kafka.admin)  # type: ignore[assignment]
        trace = trace_event(event_id, kafka=kafka, redis_state=None, outbox={"state": "absent"}, topic=topic,
                            marker_ttl=timedelta(days=7), scan_redis=False)
    assert trace.record is not None and trace.status == "unknown"
    assert "applied by: unknown" in trace.verdict and f"Kafka at {settings.kafka_bootstrap}" in trace.verdict
    assert trace.as_dict()["groups_error"]
