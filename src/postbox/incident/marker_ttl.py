"""`postbox doctor`'s marker-TTL check: each group's published TTL against Kafka's numbers.

The inequality lives in :mod:`postbox.redelivery`; this module only gathers the numbers: each
group's marker TTL from the registry the engine publishes in Redis (:mod:`postbox.effects.groups`),
``retention.ms`` and ``segment.ms`` of the outbox topics the group has committed offsets on (all
outbox topics when it has none yet, the broker's defaults when there are no outbox topics), and the
broker's ``offsets.retention.minutes`` and ``log.retention.check.interval.ms``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from confluent_kafka.admin import ConfigResource, ResourceType

from postbox.effects import groups as group_registry
from postbox.redelivery import RedeliveryWindow, human, shortfall
from postbox.topics import DLQ_SUFFIX, TOPIC_PREFIX


@dataclass(frozen=True)
class Verdict:
    """One group's result: status ok | fail, the numbers, the fix."""

    group: str
    status: str
    detail: str
    fix: str | None = None


@dataclass(frozen=True)
class BrokerNumbers:
    offsets_retention: timedelta
    check_interval: timedelta
    default_retention: timedelta | None
    default_segment: timedelta


def check_groups(kafka: Any, redis_client: Any, namespace: str = group_registry.DEFAULT_NAMESPACE) -> list[Verdict]:
    """A verdict per group in the registry (empty when no consumer has published its TTL)."""
    published = group_registry.read(redis_client, namespace=namespace)
    if not published:
        return []
    broker = broker_numbers(kafka)
    outbox_topics = [t for t in kafka.topic_names() if t.startswith(TOPIC_PREFIX) and not t.endswith(DLQ_SUFFIX)]
    topic_windows = {t: _window(cfg, broker, t) for t, cfg in kafka.topic_configs(outbox_topics).items()}
    default = RedeliveryWindow(broker.default_retention, broker.default_segment, broker.check_interval,
                               broker.offsets_retention, "broker defaults")
    verdicts = []
    for name, info in sorted(published.items()):
        consumed = {t for t, _ in kafka.committed(name)} & topic_windows.keys()
        candidates = [topic_windows[t] for t in sorted(consumed or topic_windows)] or [default]
        verdicts.append(_verdict(name, info.marker_ttl, _widest(candidates)))
    return verdicts


def _verdict(group: str, ttl: timedelta, window: RedeliveryWindow) -> Verdict:
    problem = shortfall(ttl, window)
    if problem is None:
        return Verdict(group, "ok", f"group {group}: marker TTL {human(ttl)} covers the redelivery window "
                                    f"{human(window.bound or timedelta(0))} ({window.explain()})")
    return Verdict(group, "fail", f"group {group}: {problem}; a record re-read after its marker expired is applied twice",
                   f"raise the group's marker TTL (POSTBOX_MARKER_TTL) above {human(window.bound) if window.bound else 'the window'}, "
                   "or lower the topics' retention.ms/segment.ms and the broker's offsets.retention.minutes (docs/guarantees.md); "
                   f"a group that no longer runs: HDEL {group_registry.registry_key().decode()} {group}")


def _widest(windows: list[RedeliveryWindow]) -> RedeliveryWindow:
    """The window with the largest bound (a forever-retained topic wins)."""
    return max(windows, key=lambda w: (w.bound is None, w.bound or timedelta(0)))


def _window(config: dict[str, str], broker: BrokerNumbers, topic: str) -> RedeliveryWindow:
    retention = _ms(config.get("retention.ms"))
    segment = _ms(config.get("segment.ms")) or broker.default_segment
    return RedeliveryWindow(retention, segment, broker.check_interval, broker.offsets_retention, topic)


def broker_numbers(kafka: Any) -> BrokerNumbers:
    """The broker settings of the window (from the first broker: a cluster shares them)."""
    broker_id = min(kafka.metadata().brokers)
    futures = kafka.admin.describe_configs([ConfigResource(ResourceType.BROKER, str(broker_id))],
                                           request_timeout=kafka.timeout)
    entries = {k: v.value for k, v in next(iter(futures.values())).result(kafka.timeout).items()}
    minutes = int(entries.get("offsets.retention.minutes") or 10080)
    return BrokerNumbers(
        offsets_retention=timedelta(minutes=minutes),
        check_interval=_ms(entries.get("log.retention.check.interval.ms")) or timedelta(minutes=5),
        default_retention=_ms(entries.get("log.retention.ms")) if entries.get("log.retention.ms") else
        timedelta(hours=int(entries.get("log.retention.hours") or 168)),
        default_segment=_ms(entries.get("log.roll.ms")) or timedelta(hours=int(entries.get("log.roll.hours") or 168)),
    )


def _ms(value: str | None) -> timedelta | None:
    """A Kafka millisecond setting; None for unset or negative (-1 = forever)."""
    if value in (None, ""):
        return None
    number = int(value)  # type: ignore[arg-type]
    return None if number < 0 else timedelta(milliseconds=number)


__all__ = ["BrokerNumbers", "Verdict", "broker_numbers", "check_groups"]
