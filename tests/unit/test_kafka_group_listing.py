"""Listing the consumer groups: a listing that came back with errors is that error, never the
partial (often empty) list; `postbox lag` without --group, the exporter's group series and
`trace`'s "applied by" all read it. The broker is a stand-in here (an AdminClient whose listing
carries the errors librdkafka reports); the real unreachable broker is
tests/integration/test_group_listing_errors.py."""

from __future__ import annotations

from concurrent.futures import Future

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import ConsumerGroupListing, ListConsumerGroupsResult

from postbox.errors import ConfigError, KafkaUnavailableError
from postbox.exporter import PipelineCollector
from postbox.incident.lag import group_lag
from postbox.kafka_cluster import Kafka
from tests.support.redis_servers import free_port


class _ListingAdmin:
    """An AdminClient whose group listing returns ``valid`` groups and ``errors``."""

    def __init__(self, valid: list[str], errors: list[KafkaException]) -> None:
        self.result = ListConsumerGroupsResult(valid=[ConsumerGroupListing(g, False) for g in valid], errors=errors)

    def list_consumer_groups(self, request_timeout=None):
        future: Future = Future()
        future.set_result(self.result)
        return future

    def poll(self, _timeout):
        return 0

    def close(self):
        return None


def _kafka(valid: list[str], *errors: int) -> Kafka:
    kafka = Kafka("broker:9092", timeout=1)
    kafka._admin = _ListingAdmin(valid, [KafkaException(KafkaError(code)) for code in errors])  # type: ignore[assignment]
    return kafka


def test_a_clean_listing_is_the_sorted_groups_without_the_cli_s_own():
    assert _kafka(["billing", "audit"]).group_ids() == ["audit", "billing"]


@pytest.mark.parametrize("code", [KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError.COORDINATOR_NOT_AVAILABLE])
def test_a_listing_with_errors_is_kafka_unavailable(code):
    with pytest.raises(KafkaUnavailableError) as caught:
        _kafka(["billing"], code).group_ids()
    assert "Kafka at broker:9092" in str(caught.value) and caught.value.fix


def test_a_refused_listing_names_the_acl_to_grant():
    with pytest.raises(ConfigError) as caught:
        _kafka([], KafkaError.CLUSTER_AUTHORIZATION_FAILED).group_ids()
    assert "not authorized" in str(caught.value) and "--operation Describe --cluster" in caught.value.fix


def test_lag_of_every_group_fails_instead_of_listing_none():
    with pytest.raises(KafkaUnavailableError):
        group_lag(_kafka([], KafkaError._TRANSPORT), None)


def test_the_exporter_says_kafka_is_down_when_the_listing_failed():
    dead = free_port()
    collector = PipelineCollector(f"postgresql://nobody:x@127.0.0.1:{dead}/postbox", f"http://127.0.0.1:{dead}",
                                  open_kafka=lambda: _kafka([], KafkaError._TRANSPORT))
    samples = {s.name: s.value for family in collector.collect() for s in family.samples}
    assert samples["postbox_exporter_kafka_up"] == 0
