"""#15.1 "One log stream": librdkafka's own lines (``%3|...|FAIL|...``, ``%4|...|GETPID|...``) go
through Python logging (logger ``postbox.librdkafka``) for the consumer, the producer and the
admin client, so `postbox consume --log-format json` writes nothing but JSON lines on stderr.

The condition that makes librdkafka log: a bootstrap server nobody listens on. Shown to fail
before the fix: stderr had ``%3|1764549263.893|FAIL|postbox-probe#consumer-3| ...`` lines between
the JSON ones, and the clients below wrote theirs to file descriptor 2.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from postbox import kafka_config
from postbox.kafka_config import LIBRDKAFKA_LOGGER, KafkaProperties
from tests.integration.incident_support import CLI, ROOT

pytestmark = pytest.mark.integration

#: Nothing listens here: every client logs its failed connection attempts.
NOWHERE = "127.0.0.1:1"


def test_a_json_consume_run_writes_only_json_lines_librdkafka_s_included(tmp_path):
    stderr = tmp_path / "stderr"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with stderr.open("w") as sink:
        proc = subprocess.Popen(
            [*CLI, "consume", "tests.apps.counting:strict", "--group", "logs-probe", "--topics", "outbox.event.logsprobe",
             "--kafka-bootstrap", NOWHERE, "--log-format", "json", "--require-durable", "false"],
            stdout=subprocess.DEVNULL, stderr=sink, env=env,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and LIBRDKAFKA_LOGGER not in stderr.read_text():
                assert proc.poll() is None, stderr.read_text()[-3000:]
                time.sleep(0.2)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
    lines = [line for line in stderr.read_text().splitlines() if line.strip()]
    not_json = []
    for line in lines:
        try:
            json.loads(line)
        except ValueError:
            not_json.append(line)
    assert not not_json, "\n".join(not_json[:10])
    librdkafka = [json.loads(line) for line in lines if json.loads(line).get("logger") == LIBRDKAFKA_LOGGER]
    assert librdkafka, lines[:20]
    assert any("Connect to ipv4#127.0.0.1:1 failed" in r["msg"] for r in librdkafka), librdkafka[:3]
    assert all(r["group"] == "logs-probe" for r in librdkafka)  # the run's log context rides along


def wait_for_records(client, caplog, seconds: float = 20) -> list[logging.LogRecord]:
    """Serve the client's queue (librdkafka hands log lines over on poll) until one arrives."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        client.poll(0.2)
        found = [r for r in caplog.records if r.name == LIBRDKAFKA_LOGGER]
        if found:
            return found
    return []


@pytest.mark.parametrize("kind", ["dead-letter producer", "admin client"])
def test_producer_and_admin_clients_log_through_python_logging_not_fd_2(kind, caplog, capfd):
    props = KafkaProperties()
    if kind == "admin client":
        client = AdminClient(kafka_config.build(NOWHERE, props, kafka_config.admin_role("logs-probe")))
    else:
        role = kafka_config.dead_letter_producer_role(client_id="logs-probe", delivery_timeout_ms=5000)
        client = Producer(kafka_config.build(NOWHERE, props, role))
    with caplog.at_level(logging.DEBUG, logger=LIBRDKAFKA_LOGGER):
        records = wait_for_records(client, caplog)
    assert records, f"the {kind} logged nothing through {LIBRDKAFKA_LOGGER}"
    assert any("127.0.0.1:1" in r.getMessage() for r in records)
    raw = capfd.readouterr().err
    assert "|FAIL|" not in raw and "%3|" not in raw, raw[-2000:]
