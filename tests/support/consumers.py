"""Helpers of the consumer runtime's integration tests: router-like records, consumer processes,
bounded waits, committed offsets and DLQ reads."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from postbox.consumer import App, ConsumerConfig, ConsumerRuntime

ROOT = Path(__file__).resolve().parents[2]


def create_topic(bootstrap: str, topic: str, partitions: int = 3, replication_factor: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=replication_factor)])[topic].result(timeout=30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        meta = admin.list_topics(topic=topic, timeout=10).topics.get(topic)
        if meta is not None and meta.error is None and len(meta.partitions) == partitions:
            return
        time.sleep(0.1)
    raise AssertionError(f"topic {topic} not visible after 30 s")


def router_headers(event_id: str, event_type: str, aggregate_type: str) -> list[tuple[str, bytes]]:
    """Headers as the Outbox Event Router writes them."""
    return [
        ("id", event_id.encode()),
        ("event_type", event_type.encode()),
        ("aggregate_type", aggregate_type.encode()),
        ("created_at", datetime.now(timezone.utc).isoformat().replace("+00:00", "Z").encode()),
        ("traceparent", b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
    ]


def produce(bootstrap: str, topic: str, records: Iterable[tuple[bytes | None, bytes | None, list, int | None]]) -> int:
    """Produce (key, value, headers, partition|None) records and wait for every acknowledgement."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    errors: list[str] = []
    count = 0
    for key, value, headers, partition in records:
        kwargs = {} if partition is None else {"partition": partition}
        while True:
            try:
                producer.produce(topic, value=value, key=key, headers=headers,
                                 on_delivery=lambda err, _m: errors.append(str(err)) if err else None, **kwargs)
                break
            except BufferError:
                producer.poll(0.1)
        count += 1
    left = producer.flush(30)
    assert left == 0 and not errors, f"produce failed: {left} left, errors {errors[:3]}"
    return count


def json_event(aggregate_type: str, aggregate_id: str, event_type: str, seq: int, *, partition: int | None = None,
               event_id: str | None = None) -> tuple[bytes, bytes, list, int | None]:
    eid = event_id or str(uuid.uuid4())
    return (aggregate_id.encode(), json.dumps({"seq": seq}).encode(), router_headers(eid, event_type, aggregate_type), partition)


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets (-1001 when none), read without joining the group."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        tps = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        consumer.close()


def commit_offset(bootstrap: str, group: str, topic: str, offset: int, partition: int = 0) -> None:
    """Commit ``offset`` for a group without joining it (the group stays without members)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, partition, offset)], asynchronous=False)
    finally:
        consumer.close()


def commit_at_end(bootstrap: str, group: str, topic: str, partitions: int = 3) -> None:
    """Commit ``topic``'s current end offsets for ``group`` without joining it (the topic is
    created first if it does not exist yet). A consumer of the group then starts exactly there,
    however long its own start-up takes: with ``auto.offset.reset=latest`` the end is looked up only
    after the partitions are assigned, so a record written in between — a test that emits as soon
    as the consumer is ready — is skipped (seen in CI: written 80 ms after the assignment)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic not in admin.list_topics(timeout=10).topics:
        try:
            create_topic(bootstrap, topic, partitions)
        except KafkaException as exc:  # created meanwhile (Debezium): fine
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        numbers = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        ends = [TopicPartition(topic, p, consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]) for p in numbers]
        consumer.commit(offsets=ends, asynchronous=False)
    finally:
        consumer.close()


def read_all(bootstrap: str, topic: str, expect: int, timeout: float = 30.0, linger: float = 1.0) -> list:
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"test-read-{uuid.uuid4().hex}",
        "auto.offset.reset": "earliest", "enable.auto.commit": False, "topic.metadata.refresh.interval.ms": 500,
    })
    consumer.subscribe([topic])
    out: list = []
    deadline = time.monotonic() + timeout
    settle = None
    try:
        while time.monotonic() < deadline and (settle is None or time.monotonic() < settle):
            for msg in consumer.consume(500, 0.3):
                if not msg.error():
                    out.append(msg)
            if settle is None and len(out) >= expect:
                settle = time.monotonic() + linger
    finally:
        consumer.close()
    return out


def wait_for(predicate: Callable[[], bool], timeout: float, what: str, interval: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


#: `postbox consume` whose threads' stacks SIGUSR1 writes into its log (faulthandler): what a
#: stuck consumer was doing, for the fault suite's stall report (tests/faults/stall.py).
_CONSUME = "import faulthandler, signal; faulthandler.register(signal.SIGUSR1, all_threads=True); from postbox.cli import main; main()"


class ConsumerProcess:
    """`postbox consume` in a subprocess (its own process group) with the given environment."""

    def __init__(self, app_spec: str, env: dict[str, str], log_path: Path, args: Iterable[str] = ()) -> None:
        self.log_path = log_path
        self.log = open(log_path, "ab")
        full_env = {**os.environ, **env, "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen(
            [sys.executable, "-c", _CONSUME, "consume", app_spec, *args],
            cwd=ROOT, env=full_env, stdout=self.log, stderr=subprocess.STDOUT,
        )

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        if self.alive():
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def terminate(self, timeout: float = 30) -> int:
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=5)
            raise AssertionError(f"consumer did not stop within {timeout} s after SIGTERM; log: {self.log_path}") from None

    def output(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")[-4000:]

    def close(self) -> None:
        if self.alive():
            self.kill()
        self.log.close()


class ThreadedRuntime:
    """A ConsumerRuntime in a thread of the test process (signals off; stop() to end it)."""

    def __init__(self, app: App, config: ConsumerConfig, **kwargs) -> None:
        self.runtime = ConsumerRuntime(app, config, install_signals=False, **kwargs)
        self.exit_code: int | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self.exit_code = self.runtime.run()
        except BaseException as exc:  # surfaced by stop()
            self.error = exc

    def start(self) -> "ThreadedRuntime":
        self.thread.start()
        if not self.runtime.ready.wait(30):
            raise AssertionError(f"runtime not subscribed after 30 s (error: {self.error})")
        return self

    def stop(self, timeout: float = 30) -> int | None:
        self.runtime.stop()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "runtime thread did not stop"
        if self.error:
            raise self.error
        return self.exit_code

    def ok(self) -> bool:
        """True while running; raises what ended the runtime thread early."""
        if self.error is not None:
            raise AssertionError(f"runtime thread failed: {self.error!r}") from self.error
        if not self.thread.is_alive():
            raise AssertionError(f"runtime thread exited early with {self.exit_code}")
        return True

    @property
    def metrics(self):
        return self.runtime.metrics
