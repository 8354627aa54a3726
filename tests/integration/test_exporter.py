"""#16.4 `postbox exporter` against the stack: the replication slot's lag and state, the connector's
state, and a group's lag in events and seconds from the broker's committed offsets (a group whose
consumer is not running); an unreachable database or Connect is a state, not a failed scrape; the
served form answers /metrics and stops on SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.cli import invoke
from tests.support.consumers import ROOT, commit_offset, create_topic, json_event, produce, wait_for
from tests.support.redis_servers import free_port

pytestmark = pytest.mark.integration


def _samples(text: str) -> dict[tuple[str, frozenset], float]:
    return {(s.name, frozenset(s.labels.items())): s.value for f in text_string_to_metric_families(text) for s in f.samples}


def test_once_reports_slot_connector_and_a_stopped_groups_lag(settings, unique):
    topic = f"outbox.event.exp{unique}"
    group = f"test-exp-{unique}"
    create_topic(settings.kafka_bootstrap, topic, 1)
    produce(settings.kafka_bootstrap, topic, [json_event(f"exp{unique}", "a", "Counted", i, partition=0) for i in range(5)])
    commit_offset(settings.kafka_bootstrap, group, topic, 2)  # consumed 2 of 5, then stopped
    time.sleep(1.1)  # the oldest unconsumed record is then older than a second
    code, out = invoke("exporter", "--once", "--group", group)
    assert code == 0
    samples = _samples(out)
    assert samples[("postbox_group_lag", frozenset({"group": group, "topic": topic, "partition": "0"}.items()))] == 3
    assert samples[("postbox_group_oldest_unconsumed_age_seconds", frozenset({"group": group}.items()))] >= 1
    assert samples[("postbox_exporter_kafka_up", frozenset())] == 1
    slot = {"slot": "postbox_outbox"}
    assert samples[("postbox_slot_state", frozenset({**slot, "state": "active"}.items()))] == 1
    assert samples[("postbox_slot_lag_bytes", frozenset(slot.items()))] >= 0
    assert samples[("postbox_connector_state", frozenset({"connector": "postbox-outbox", "state": "RUNNING"}.items()))] == 1
    assert samples[("postbox_connector_flowing", frozenset({"connector": "postbox-outbox"}.items()))] == 1
    assert any(name == "process_cpu_seconds_total" for name, _ in samples) and any(n == "postbox_build_info" for n, _ in samples)


def test_unreachable_sources_are_states_and_the_served_exporter_stops_on_sigterm(settings, tmp_path):
    dead = free_port()
    code, out = invoke("exporter", "--once", "--no-groups", "--database-url", f"postgresql://nobody:x@127.0.0.1:{dead}/postbox",
                       "--connect-url", f"http://127.0.0.1:{dead}")
    assert code == 0
    samples = _samples(out)
    assert samples[("postbox_slot_state", frozenset({"slot": "postbox_outbox", "state": "unreachable"}.items()))] == 1
    assert samples[("postbox_connector_state", frozenset({"connector": "postbox-outbox", "state": "unreachable"}.items()))] == 1
    assert samples[("postbox_connector_flowing", frozenset({"connector": "postbox-outbox"}.items()))] == 0
    assert not any(name == "postbox_exporter_kafka_up" for name, _ in samples)  # --no-groups: no Kafka at all

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", "from postbox.cli import main; main()", "exporter", "--no-groups",
                             "--listen", f"127.0.0.1:{port}"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        def scraped() -> bool:
            try:
                return "postbox_slot_state" in httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
            except httpx.TransportError:
                return False

        wait_for(scraped, 30, "the exporter's /metrics")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
