"""Prometheus metrics of one consumer runtime (its own registry, so several runtimes can share a
process in tests). The runtime serves them at ``http://<host>:<port>/metrics`` beside ``/healthz``
and ``/readyz`` (:mod:`postbox.consumer.health`).

The registry also holds the standard ``process_*`` and ``python_*`` collectors (a private registry
has none of prometheus_client's defaults) and ``postbox_build_info`` (always 1; labels: the postbox,
Python, confluent-kafka and librdkafka versions), so a dashboard can tell versions apart.
"""

from __future__ import annotations

import itertools
import math
import platform
import threading
import time
from bisect import bisect_right
from functools import reduce
from operator import add
from collections.abc import Iterator, Sequence

import confluent_kafka
from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
)
from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

import postbox

#: The collectors prometheus_client registers in its default registry: process_*, python_info, python_gc_*.
DEFAULT_COLLECTORS = (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR)


def register_build_info(registry: CollectorRegistry) -> None:
    """``postbox_build_info{version, python, confluent_kafka, librdkafka} 1`` in ``registry``."""
    info = Gauge("postbox_build_info", "The running postbox build (always 1)",
                 ["version", "python", "confluent_kafka", "librdkafka"], registry=registry)  # fmt: skip
    info.labels(postbox.__version__, platform.python_version(), confluent_kafka.__version__, confluent_kafka.libversion()[0]).set(1)


def register_defaults(registry: CollectorRegistry) -> None:
    """The process/python collectors and the build info, in a registry of our own."""
    for collector in DEFAULT_COLLECTORS:
        registry.register(collector)
    register_build_info(registry)

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
_E2E_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
_BATCH_BUCKETS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)


class BatchHistogram:
    """A histogram of one consumer group fed a batch of observations at once (:meth:`observe_many`).

    Why not prometheus_client's ``Histogram``: it takes one observation per call, each under its
    lock with a Python walk of the buckets (~1.5 µs); fed every event's end-to-end latency that was
    a tenth of the consumer loop's per-event work. Here a batch costs a ``bisect`` per value and
    one locked update. Exposed the same way (``_bucket{le=...}``, ``_count``, ``_sum``, ``_created``)
    by registering it as a collector in ``registry``."""

    def __init__(self, name: str, documentation: str, group: str, buckets: Sequence[float], registry: CollectorRegistry) -> None:
        self.name = name
        self.documentation = documentation
        self.group = group
        self._bounds = (*sorted(float(b) for b in buckets if b != math.inf), math.inf)
        self._counts = [0] * len(self._bounds)
        self._sum = 0.0
        self._created = time.time()
        self._lock = threading.Lock()
        registry.register(self)

    def observe_many(self, values: Sequence[float]) -> None:
        """Count every value (finite seconds; a value on a bound falls in that bound's bucket, like ``le``)."""
        if not values:
            return
        # Per bucket, not per value: sorted once, each bound's cumulative count is one bisect.
        ordered = sorted(values)
        counts: list[int] = []
        below = 0
        for bound in self._bounds:
            upto = bisect_right(ordered, bound)  # values <= bound (the last bound is +Inf)
            counts.append(upto - below)
            below = upto
        with self._lock:
            self._counts = [a + b for a, b in zip(self._counts, counts)]
            # In order, as one observation at a time adds them (same rounding; sum() compensates
            # since Python 3.12), in C.
            self._sum = reduce(add, values, self._sum)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            counts, total = self._counts, self._sum
        family = HistogramMetricFamily(self.name, self.documentation, labels=["group"])
        family.add_metric([self.group], [(floatToGoString(b), c) for b, c in zip(self._bounds, itertools.accumulate(counts))], total)
        family.samples.append(Sample(f"{self.name}_created", {"group": self.group}, self._created))
        yield family


class Metrics:
    """Every metric the runtime records; names start with ``postbox_consumer_``."""

    def __init__(self, group: str, registry: CollectorRegistry | None = None) -> None:
        self.group = group
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        if registry is None:
            register_defaults(r)
        self.consumed = Counter("postbox_consumer_events_consumed", "Records taken from Kafka", ["group", "topic"], registry=r)
        self.applied = Counter("postbox_consumer_events_applied", "Events whose effects were applied", ["group", "topic"], registry=r)
        self.duplicates = Counter(
            "postbox_consumer_duplicates_skipped", "Events skipped because their dedupe marker existed", ["group", "topic"], registry=r
        )
        self.failures = Counter(
            "postbox_consumer_failures",
            "Failures by class (kind=permanent: dead-lettered; kind=transient: retried)",
            ["group", "topic", "error_class", "kind"],
            registry=r,
        )
        self.dead_lettered = Counter("postbox_consumer_dead_lettered", "Records written to <topic>.dlq", ["group", "topic"], registry=r)
        self.retries = Counter(
            "postbox_consumer_retries", "Partition retries scheduled after a transient failure", ["group", "reason"], registry=r
        )
        self.handler_retries = Counter(
            "postbox_consumer_handler_retries", "In-place retries of a raising handler", ["group"], registry=r
        )
        self.batch_size = Histogram("postbox_consumer_batch_size", "Records per batch", ["group"], buckets=_BATCH_BUCKETS, registry=r)
        self.apply_seconds = Histogram(
            "postbox_consumer_apply_seconds", "engine.apply duration per batch", ["group"], buckets=_LATENCY_BUCKETS, registry=r
        )
        self.end_to_end_seconds = BatchHistogram(
            "postbox_consumer_end_to_end_seconds", "From the event's created_at header to its apply acknowledgement", group, _E2E_BUCKETS, r
        )
        self.lag = Gauge("postbox_consumer_lag", "High watermark minus committed position", ["group", "topic", "partition"], registry=r)
        self.paused = Gauge("postbox_consumer_paused_partitions", "Partitions waiting out a backoff", ["group"], registry=r)
        self.assigned = Gauge("postbox_consumer_assigned_partitions", "Partitions assigned to this process", ["group"], registry=r)
        self.commits = Counter("postbox_consumer_commits", "Offset commits by result", ["group", "result"], registry=r)
        self.rebalances = Counter("postbox_consumer_rebalances", "Partitions assigned/revoked/lost", ["group", "kind"], registry=r)

    def value(self, name: str, **labels: str) -> float:
        """A sample's current value (0 when absent) — for tests and the bench."""
        found = self.registry.get_sample_value(name, {"group": self.group, **labels})
        return found or 0.0

    def total(self, name: str) -> float:
        """The sum of a counter over all its label values."""
        total = 0.0
        for metric in self.registry.collect():
            for sample in metric.samples:
                if sample.name == name and sample.labels.get("group") == self.group:
                    total += sample.value
        return total
