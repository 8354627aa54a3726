"""The consumer's end-to-end latency histogram takes a batch of observations at once
(metrics.BatchHistogram): what it exposes must be what prometheus_client's own Histogram exposes
for the same values observed one by one — same buckets, count and sum, in both text formats — so
dashboards and alerts built on postbox_consumer_end_to_end_seconds see no difference."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from postbox.consumer.metrics import BatchHistogram

BUCKETS = (0.01, 0.5, 1, 2.5, 60)
seconds = st.one_of(st.sampled_from([0.0, 0.01, 0.5, 1.0, 2.5, 60.0, 61.0]), st.floats(0, 1e6, allow_nan=False))


def _without_created(text: bytes) -> list[str]:
    return [line for line in text.decode().splitlines() if "_created" not in line]


@settings(max_examples=200, deadline=None)
@given(batches=st.lists(st.lists(seconds, max_size=20), max_size=5))
def test_a_batch_histogram_exposes_what_prometheus_histogram_does(batches: list[list[float]]) -> None:
    theirs, ours = CollectorRegistry(), CollectorRegistry()
    reference = Histogram("e2e_seconds", "latency", ["group"], buckets=BUCKETS, registry=theirs).labels("g")
    batched = BatchHistogram("e2e_seconds", "latency", "g", BUCKETS, ours)
    for batch in batches:
        for value in batch:
            reference.observe(value)
        batched.observe_many(batch)
    assert _without_created(generate_latest(ours)) == _without_created(generate_latest(theirs))
    assert _without_created(generate_openmetrics(ours)) == _without_created(generate_openmetrics(theirs))
    assert ours.get_sample_value("e2e_seconds_created", {"group": "g"}) is not None
