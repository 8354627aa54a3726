"""#12.2: the shipped configuration keeps every record's redelivery window inside the default
marker TTL (read from the files a user runs, not restated here), and the inequality is right.

Before the fix the local broker and compose had no segment roll setting (Kafka's default 7 days),
so a record could live 7 + 7 days; the 8-day markers expired first.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
import yaml

from postbox.effects.engine import DEFAULT_MARKER_TTL
from postbox.redelivery import (
    OFFSETS_RETENTION,
    RETENTION_CHECK_INTERVAL,
    SEGMENT_ROLL,
    TOPIC_RETENTION,
    RedeliveryWindow,
    shipped_window,
    shortfall,
)

ROOT = Path(__file__).resolve().parents[2]
KAFKA_DEFAULT_SEGMENT = timedelta(days=7)  # log.roll.hours=168 when unset
KAFKA_DEFAULT_CHECK = timedelta(minutes=5)


def _properties(path: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line and not line.lstrip().startswith("#"))
    return {k.strip(): v.strip() for k, v in pairs}


def _window(retention_h: str, roll_h: str | None, check_ms: str | None, offsets_min: str) -> RedeliveryWindow:
    return RedeliveryWindow(
        timedelta(hours=int(retention_h)),
        timedelta(hours=int(roll_h)) if roll_h else KAFKA_DEFAULT_SEGMENT,
        timedelta(milliseconds=int(check_ms)) if check_ms else KAFKA_DEFAULT_CHECK,
        timedelta(minutes=int(offsets_min)),
    )


def test_local_broker_window_is_inside_the_default_marker_ttl() -> None:
    props = _properties(ROOT / "infra" / "local" / "kafka.properties")
    window = _window(props["log.retention.hours"], props.get("log.roll.hours"),
                     props.get("log.retention.check.interval.ms"), props["offsets.retention.minutes"])
    assert shortfall(DEFAULT_MARKER_TTL, window) is None, shortfall(DEFAULT_MARKER_TTL, window)
    assert window == shipped_window().__class__(TOPIC_RETENTION, SEGMENT_ROLL, RETENTION_CHECK_INTERVAL, OFFSETS_RETENTION)


def test_compose_broker_window_is_inside_the_default_marker_ttl() -> None:
    env = yaml.safe_load((ROOT / "infra" / "docker-compose.yml").read_text())["services"]["kafka"]["environment"]
    window = _window(str(env["KAFKA_LOG_RETENTION_HOURS"]), str(env.get("KAFKA_LOG_ROLL_HOURS") or ""),
                     str(env.get("KAFKA_LOG_RETENTION_CHECK_INTERVAL_MS") or ""),
                     str(env.get("KAFKA_OFFSETS_RETENTION_MINUTES") or 10080))
    assert shortfall(DEFAULT_MARKER_TTL, window) is None, shortfall(DEFAULT_MARKER_TTL, window)


def test_topics_the_connector_creates_carry_the_window_themselves() -> None:
    """On a broker whose defaults differ (a managed cluster), the outbox topics still get the window."""
    config = json.loads((ROOT / "connectors" / "outbox.json").read_text())["config"]
    retention = timedelta(milliseconds=int(config["topic.creation.default.retention.ms"]))
    segment = timedelta(milliseconds=int(config["topic.creation.default.segment.ms"]))
    assert (retention, segment) == (TOPIC_RETENTION, SEGMENT_ROLL)
    assert shortfall(DEFAULT_MARKER_TTL, RedeliveryWindow(retention, segment, KAFKA_DEFAULT_CHECK, OFFSETS_RETENTION)) is None


def test_the_consumer_default_is_the_engine_default() -> None:
    from postbox.consumer.config import ConsumerConfig

    assert ConsumerConfig.__dataclass_fields__["marker_ttl"].default == DEFAULT_MARKER_TTL


@pytest.mark.parametrize("ttl,retention,segment,offsets,ok", [
    (timedelta(days=8), timedelta(days=7), timedelta(days=7), timedelta(days=7), False),   # Kafka's default roll: 14 days
    (timedelta(days=8), timedelta(days=7), timedelta(hours=12), timedelta(days=7), True),
    (timedelta(days=8), timedelta(days=7), timedelta(hours=12), timedelta(days=9), False),  # offsets outlive markers
    (timedelta(seconds=30), timedelta(seconds=20), timedelta(seconds=5), timedelta(seconds=1), True),
    (timedelta(seconds=30), timedelta(seconds=20), timedelta(seconds=10), timedelta(seconds=1), False),  # 20+10+1 > 30
    (timedelta(days=365), None, timedelta(hours=1), timedelta(days=1), False),  # retention.ms=-1: nothing covers it
])
def test_the_inequality(ttl: timedelta, retention: timedelta | None, segment: timedelta, offsets: timedelta, ok: bool) -> None:
    window = RedeliveryWindow(retention, segment, timedelta(seconds=1), offsets)
    assert (shortfall(ttl, window) is None) is ok
