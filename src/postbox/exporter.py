"""`postbox exporter`: the pipeline's state outside the consumers, as Prometheus metrics.

A consumer exports what it sees (:mod:`postbox.consumer.metrics`); what no consumer sees comes from
here, read fresh at each scrape: the Debezium replication slot (lag and retained WAL in bytes,
its state, how much WAL may still be written before it is lost), the connector and its tasks
(their Connect states), and each consumer group's lag from the broker's committed offsets — in
events and as the age of the oldest unconsumed event — which stays true when a consumer is down
(its own lag gauge is then gone). Run it as a sidecar next to Connect or as a scrape job's
target; one exporter serves the whole pipeline.

Metric names live in :data:`METRICS` (the dashboard's test compares its queries with them).
Each source is read independently: an unreachable database, Connect or Kafka shows as its state
(``postbox_slot_state{state="unreachable"}``, ``postbox_connector_state{state="unreachable"}``,
``postbox_exporter_kafka_up 0``), never as a failed scrape.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from postbox.connector import connector_status, flowing
from postbox.pipelines import Pipeline
from postbox.slot import slot_status

#: Every metric this module exports, with its help text.
METRICS: dict[str, str] = {
    "postbox_slot_lag_bytes": "WAL bytes between the server's current position and what the slot's consumer confirmed",
    "postbox_slot_retained_bytes": "WAL bytes the slot keeps on the server (from its restart_lsn)",
    "postbox_slot_safe_wal_bytes": "WAL bytes that may still be written before the slot's WAL is in danger (absent when unlimited)",
    "postbox_slot_state": "1 for the slot's state (active, inactive, missing, unreachable), 0 for the others",
    "postbox_slot_wal_status": "1 for the slot's wal_status (reserved, extended, unreserved, lost)",
    "postbox_connector_state": "1 for the connector's Connect state, 0 for the others",
    "postbox_connector_tasks": "The connector's tasks per Connect state",
    "postbox_connector_flowing": "1 when the connector and all its tasks (at least one) are RUNNING",
    "postbox_group_lag": "Records after the group's committed offset (end - committed), per partition",
    "postbox_group_oldest_unconsumed_age_seconds": "Age of the oldest record the group has not committed past (0 when none)",
    "postbox_group_members": "Members of the consumer group",
    "postbox_exporter_kafka_up": "1 when the last scrape read the consumer groups from Kafka",
    "postbox_exporter_scrape_seconds": "Time the last scrape took",
}

SLOT_STATES = ("active", "inactive", "missing", "unreachable")
WAL_STATUSES = ("reserved", "extended", "unreserved", "lost")
CONNECTOR_STATES = ("RUNNING", "PAUSED", "STOPPED", "FAILED", "UNASSIGNED", "RESTARTING", "not registered", "unreachable")


class PipelineCollector(Collector):
    """Reads the slot, the connector and (with ``open_kafka``) the groups' lag at each scrape.

    ``open_kafka``: makes a :class:`postbox.kafka_cluster.Kafka` handle, one per scrape, closed
    before the scrape ends; None leaves out the group metrics. ``groups``: only these groups (default:
    every group with commits on outbox topics). ``pipeline``: whose slot and connector
    (default ``POSTBOX_PIPELINE``, else the default pipeline's); ``slot``/``connector`` name others."""

    def __init__(self, database_url: str, connect_url: str, *, connector: str | None = None, slot: str | None = None,
                 open_kafka: Callable[[], Any] | None = None, groups: list[str] | None = None,
                 pipeline: Pipeline | str | None = None) -> None:
        chosen = Pipeline.parse(pipeline)
        self.database_url = database_url
        self.connect_url = connect_url
        self.connector = connector or chosen.connector
        self.slot = slot or chosen.slot
        self.groups = groups
        self._open_kafka = open_kafka
        self._kafka: Any = None
        self._lock = threading.Lock()  # scrapes may overlap; the Kafka handle is not shared between them

    def describe(self) -> list[Any]:
        return []  # no metrics at registration: nothing is read until a scrape

    def collect(self) -> Iterator[Any]:
        started = time.monotonic()
        with self._lock:
            yield from slot_metrics(slot_status(self.database_url, self.slot))
            yield from connector_metrics(connector_status(self.connect_url, self.connector))
            if self._open_kafka is not None:
                yield from self._group_metrics()
        yield _gauge("postbox_exporter_scrape_seconds", [], [([], time.monotonic() - started)])

    def _group_metrics(self) -> Iterator[Any]:
        from postbox.incident.lag import group_lag, now_ms

        try:
            # A handle per scrape, closed with it: librdkafka can abort a process whose long-lived
            # admin client gets a late answer to a request that timed out across a broker's restart.
            self._kafka = self._open_kafka() if self._open_kafka else None
            groups = group_lag(self._kafka, self.groups)
        except Exception:  # noqa: BLE001 - Kafka down or refusing: reported as kafka_up 0, retried next scrape
            yield _gauge("postbox_exporter_kafka_up", [], [([], 0)])
            return
        finally:
            self.close()
        yield _gauge("postbox_exporter_kafka_up", [], [([], 1)])
        now = now_ms()
        lag, age, members = [], [], []
        for group in groups:
            lag += [([group.group, p.topic, str(p.partition)], p.lag) for p in group.partitions]
            oldest = min((p.oldest_unconsumed_ms for p in group.partitions if p.oldest_unconsumed_ms), default=None)
            age.append(([group.group], max(0.0, (now - oldest) / 1000) if oldest else 0.0))
            members.append(([group.group], group.members))
        yield _gauge("postbox_group_lag", ["group", "topic", "partition"], lag)
        yield _gauge("postbox_group_oldest_unconsumed_age_seconds", ["group"], age)
        yield _gauge("postbox_group_members", ["group"], members)

    def close(self) -> None:
        if self._kafka is not None:
            try:
                self._kafka.close()
            finally:
                self._kafka = None


def slot_metrics(slot: dict[str, Any]) -> Iterator[Any]:
    """The replication slot's gauges from a :func:`postbox.slot.slot_status` report."""
    name = slot["name"]
    for metric, key in (("postbox_slot_lag_bytes", "lag_bytes"), ("postbox_slot_retained_bytes", "retained_bytes"),
                        ("postbox_slot_safe_wal_bytes", "safe_wal_size")):  # fmt: skip
        value = slot.get(key)
        yield _gauge(metric, ["slot"], [([name], value)] if value is not None else [])
    yield _gauge("postbox_slot_state", ["slot", "state"], [([name, s], int(slot.get("state") == s)) for s in SLOT_STATES])
    wal = slot.get("wal_status")
    yield _gauge("postbox_slot_wal_status", ["slot", "wal_status"], [([name, s], int(wal == s)) for s in WAL_STATUSES] if wal else [])


def connector_metrics(report: dict[str, Any]) -> Iterator[Any]:
    """The connector's gauges from a :func:`postbox.connector.connector_status` report."""
    name = report["name"]
    state = report.get("state")
    states = CONNECTOR_STATES if state in CONNECTOR_STATES else (*CONNECTOR_STATES, state)
    yield _gauge("postbox_connector_state", ["connector", "state"], [([name, str(s)], int(state == s)) for s in states])
    counts: dict[str, int] = {}
    for task in report.get("tasks") or []:
        counts[task["state"]] = counts.get(task["state"], 0) + 1
    yield _gauge("postbox_connector_tasks", ["connector", "state"], [([name, s], n) for s, n in sorted(counts.items())])
    yield _gauge("postbox_connector_flowing", ["connector"], [([name], int(flowing(report)))])


def registry_for(collector: PipelineCollector) -> CollectorRegistry:
    """A registry with the pipeline collector, the process/python collectors and the build info."""
    from postbox.consumer.metrics import register_defaults

    registry = CollectorRegistry()
    register_defaults(registry)
    registry.register(collector)
    return registry


def _gauge(name: str, labels: list[str], samples: list[tuple[list[str], float]]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, METRICS[name], labels=labels)
    for values, value in samples:
        family.add_metric(values, float(value))
    return family
