"""What the live view shows, gathered once a second: consumer metrics (Prometheus), lag (Kafka),
orders ready to ship and their saga latency (Redis), and rates between two samples."""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import redis
from prometheus_client.parser import text_string_to_metric_families

from consumers.shop.keys import shard_keys

COUNTERS = {
    "applied": "postbox_consumer_events_applied",
    "duplicates": "postbox_consumer_duplicates_skipped",
    "dead_lettered": "postbox_consumer_dead_lettered",
    "consumed": "postbox_consumer_events_consumed",
}
E2E = "postbox_consumer_end_to_end_seconds"


@dataclass
class Scrape:
    """One process generation's last scrape: counter totals and the end-to-end histogram."""

    counters: dict[str, float] = field(default_factory=dict)
    buckets: dict[float, float] = field(default_factory=dict)   # upper bound -> cumulative count


def scrape(client: httpx.Client, port: int) -> Scrape | None:
    try:
        text = client.get(f"http://127.0.0.1:{port}/metrics", timeout=1.0).text
    except httpx.HTTPError:
        return None
    out = Scrape()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            for key, name in COUNTERS.items():
                if sample.name == name + "_total":
                    out.counters[key] = out.counters.get(key, 0.0) + sample.value
            if sample.name == "postbox_consumer_assigned_partitions":
                out.counters["assigned"] = out.counters.get("assigned", 0.0) + sample.value
            if sample.name == E2E + "_bucket":
                bound = float(sample.labels["le"])
                out.buckets[bound] = out.buckets.get(bound, 0.0) + sample.value
    return out


def histogram_quantile(q: float, buckets: dict[float, float]) -> float | None:
    """Prometheus-style quantile of cumulative buckets (linear inside the bucket)."""
    items = sorted(buckets.items())
    if not items or items[-1][1] <= 0:
        return None
    total = items[-1][1]
    rank = q * total
    prev_bound, prev_count = 0.0, 0.0
    for bound, count in items:
        if count >= rank:
            if math.isinf(bound):
                return prev_bound
            if count == prev_count:
                return bound
            return prev_bound + (bound - prev_bound) * (rank - prev_count) / (count - prev_count)
        prev_bound, prev_count = bound, count
    return prev_bound


def quantiles(values: Sequence[float], qs: Iterable[float] = (0.5, 0.95, 0.99)) -> dict[str, float | None]:
    ordered = sorted(values)
    out: dict[str, float | None] = {}
    for q in qs:
        key = f"p{int(q * 100)}"
        if not ordered:
            out[key] = None
        else:
            out[key] = ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]
    return out


class GroupMetrics:
    """Counters of one group summed over its process generations (a SIGKILLed process's counters
    stop at its last scrape; its successor starts from zero)."""

    def __init__(self) -> None:
        self.by_generation: dict[int, Scrape] = {}

    def update(self, generation: int, scraped: Scrape | None) -> None:
        if scraped is not None:
            self.by_generation[generation] = scraped

    def counter(self, key: str) -> float:
        return sum(s.counters.get(key, 0.0) for s in self.by_generation.values())

    def buckets(self) -> dict[float, float]:
        merged: dict[float, float] = {}
        for s in self.by_generation.values():
            for bound, count in s.buckets.items():
                merged[bound] = merged.get(bound, 0.0) + count
        return merged

    def latency(self) -> dict[str, float | None]:
        b = self.buckets()
        return {f"p{int(q * 100)}": histogram_quantile(q, b) for q in (0.5, 0.95, 0.99)}


class ReadyLog:
    """Reads the shipping projection's ready log incrementally: orders ready to ship and the saga
    latency of each (OrderPlaced committed → ready to ship in Redis)."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.shards = [k["ready_log"] for k in shard_keys("ship")]
        self.read = [0] * len(self.shards)
        self.latencies: list[float] = []

    def poll(self) -> None:
        with self.client.pipeline(transaction=False) as pipe:
            for key, start in zip(self.shards, self.read):
                pipe.lrange(key, start, start + 4999)
            replies = pipe.execute()
        for i, entries in enumerate(replies):
            self.read[i] += len(entries)
            for entry in entries:
                parts = entry.decode().split()
                if len(parts) == 3 and parts[1]:
                    self.latencies.append(max(0.0, (int(parts[2]) - int(parts[1])) / 1000))

    @property
    def count(self) -> int:
        """Orders that became ready to ship (some were cancelled afterwards)."""
        return sum(self.read)

    def ready_now(self) -> int:
        """Orders in the ready-to-ship sets right now."""
        with self.client.pipeline(transaction=False) as pipe:
            for k in shard_keys("ship"):
                pipe.scard(k["ready"])
            return sum(pipe.execute())


class Rates:
    """events/s from two samples of a monotonic total, smoothed over a few seconds."""

    def __init__(self, window: float = 3.0) -> None:
        self.window = window
        self.samples: dict[str, list[tuple[float, float]]] = {}

    def add(self, name: str, value: float, now: float | None = None) -> float:
        now = time.monotonic() if now is None else now
        series = self.samples.setdefault(name, [])
        series.append((now, value))
        while len(series) > 2 and now - series[0][0] > self.window:
            series.pop(0)
        (t0, v0), (t1, v1) = series[0], series[-1]
        return max(0.0, (v1 - v0) / (t1 - t0)) if t1 > t0 else 0.0


def lag_of(kafka: Any, group: str, topics: Sequence[str], ends: dict[str, dict[int, tuple[int, int]]]) -> int:
    """High watermark minus committed offset, summed over the group's partitions."""
    committed = kafka.committed(group)
    total = 0
    for topic in topics:
        for partition, (low, high) in ends.get(topic, {}).items():
            done = committed.get((topic, partition))
            total += max(0, high - (done if done is not None and done >= 0 else low))
    return total
