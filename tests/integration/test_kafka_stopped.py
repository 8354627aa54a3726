"""With the stack's Kafka broker stopped (the process, not a closed port on a Kafka that never
ran), the exporter says ``postbox_exporter_kafka_up 0`` and ``postbox lag`` exits non-zero with
the error, while the database and Connect still answer; both are back to normal once Kafka is."""

from __future__ import annotations

import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from postbox.stack.stack import LocalStack
from tests.integration.incident_support import run_cli

pytestmark = [pytest.mark.integration, pytest.mark.disruptive]

FAST = {"POSTBOX_KAFKA_TIMEOUT": "3"}


def _kafka_up() -> float:
    done = run_cli("exporter", "--once", env=FAST)
    assert done.returncode == 0, done.stderr
    samples = {s.name: s.value for f in text_string_to_metric_families(done.stdout) for s in f.samples}
    return samples["postbox_exporter_kafka_up"]


def test_exporter_and_lag_with_kafka_stopped(settings):
    assert _kafka_up() == 1
    stack = LocalStack(locate_tools=False)
    assert stack.kafka.stop()
    try:
        assert _kafka_up() == 0
        lag = run_cli("lag", env=FAST)
        assert lag.returncode == 1, lag.stdout
        assert f"Kafka at {settings.kafka_bootstrap} did not answer" in lag.stderr and "fix:" in lag.stderr
    finally:
        LocalStack().up(lambda _line: None)
    # A restarted broker answers metadata before its group coordinator has loaded the offsets
    # partitions: under load the first scrapes can still say 0 (with the 3 s timeout), then 1.
    deadline = time.monotonic() + 90
    while _kafka_up() != 1:
        assert time.monotonic() < deadline, "the exporter still says kafka_up 0 90 s after the broker's restart"
        time.sleep(2)
    assert run_cli("lag", env=FAST).returncode == 0
