"""Bad-input catalogue, records of #12.5, #12.13 and #12.14, produced by kafka-python (an
independent client), one partition with a good event after every bad record.

Each bad record is dead-lettered with its specific error class, the partition moves on (the good
event after it is applied) and the consumer stays up. On the main this was written against:
the 5,000-digit integer (ValueError) and the 200,000-deep array (RecursionError) escaped the batch
and ended the consumer (it restarted into the same batch); ``{"due_days": "fourteen"}`` was applied
although the event's schema says int; and ``postbox trace`` / ``dlq replay --event-id`` refused the
printable non-UUID ids the consumer had applied and dead-lettered.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from postbox.consumer import App, ConsumerConfig
from postbox.effects import Effects, aggregate_keys
from postbox.events import Event
from tests.apps.counting import record
from tests.support.consumers import ROOT, ThreadedRuntime, committed, create_topic, read_all, router_headers, wait_for
from tests.support.independent import produce_independently

pytestmark = pytest.mark.integration

INVOICE_SCHEMA = {
    "type": "record", "name": "InvoiceIssued",
    "fields": [
        {"name": "invoice_id", "type": "string"},
        {"name": "seq", "type": "int"},
        {"name": "due_days", "type": "int"},
        {"name": "currency", "type": "string", "default": "EUR"},
    ],
}


def _app(schemas: Path) -> App:
    app = App(schemas_dir=schemas)

    @app.handler("*", "Counted")
    def counted(event: Event, fx: Effects) -> None:
        record(event, fx)

    @app.handler("*", "Boom")
    def boom(event: Event, fx: Effects) -> None:
        raise ValueError(f"boom on {event.id}")

    @app.handler("*", "BadRoute", routing_key=lambda event: event.payload["shard"])  # KeyError: no "shard"
    def bad_route(event: Event, fx: Effects) -> None:
        record(event, fx)

    @app.handler("*", "InvoiceIssued")
    def invoice(event: Event, fx: Effects) -> None:
        k = aggregate_keys(event.aggregate_type, event.aggregate_id)
        fx.hset(k(f"invoice:{event.payload['invoice_id']}"), {"due_days": event.payload["due_days"], "currency": event.payload["currency"]})
        record(event, fx)

    return app


def test_poison_records_are_dead_lettered_with_their_own_error_and_the_consumer_stays_up(settings, redis_client, unique, tmp_path):
    agg = f"poison{unique}"
    topic = f"outbox.event.{agg}"
    group = f"test-poison-{unique}"
    schemas = tmp_path / "schemas"
    (schemas / agg).mkdir(parents=True)
    (schemas / agg / "InvoiceIssued.v1.avsc").write_text(json.dumps(INVOICE_SCHEMA))
    create_topic(settings.kafka_bootstrap, topic, partitions=1)
    stock_id = f"{unique}-42"  # what a stock outbox with a bigint/varchar id column sends (#12.13)
    stock_failed_id = f"{unique}:43:1"  # ':' is allowed in an id (and not to be read as a dead letter's ref)

    def hdr(event_type: str, event_id: str | None = None) -> list:
        return router_headers(event_id or str(uuid.uuid4()), event_type, agg)

    cases = {  # name -> (value, headers, error class, fragment of the error) ; None class: applied
        "5,000-digit integer": (b'{"seq": ' + b"7" * 5000 + b"}", hdr("Counted"), "DecodeError", "digits"),
        "array nested 200,000 deep": (b'{"seq": ' + b"[" * 200_000 + b"]" * 200_000 + b"}", hdr("Counted"), "DecodeError", "nested too deeply"),
        "JSON against its schema": (json.dumps({"invoice_id": "i2", "seq": 0, "due_days": "fourteen"}).encode(), hdr("InvoiceIssued"),
                                    "SchemaMismatch", "field 'due_days' = 'fourteen': expected int, got str"),
        "JSON missing a required field": (json.dumps({"invoice_id": "i3", "seq": 0}).encode(), hdr("InvoiceIssued"), "SchemaMismatch", "'due_days' is missing"),
        "routing_key raising": (b'{"seq": 0}', hdr("BadRoute"), "RoutingError", "KeyError"),
        "non-ASCII id": (b'{"seq": 0}', hdr("Counted", "caf\u00e9-1"), "DecodeError", "malformed 'id' header"),
        "non-UUID id, handler fails": (b'{"seq": 0}', hdr("Boom", stock_failed_id), "HandlerError:ValueError", "boom on"),
    }
    records, expected, good = [], {}, []
    seq = 0
    for name, (value, headers, cls, fragment) in cases.items():
        seq += 1
        good.append(seq)
        records.append((b"a", json.dumps({"seq": seq}).encode(), hdr("Counted"), 0))
        records.append((b"a", value, headers, 0))
        expected[len(records) - 1] = (name, cls, fragment)
    # Good records: a stock outbox's printable non-UUID id, and a JSON invoice that fits (currency defaulted).
    records.append((b"a", json.dumps({"seq": seq + 1}).encode(), hdr("Counted", stock_id), 0))
    records.append((b"a", json.dumps({"invoice_id": "i1", "seq": seq + 2, "due_days": 14, "added_by_a_newer_writer": True}).encode(),
                    hdr("InvoiceIssued"), 0))
    good += [seq + 1, seq + 2]
    produce_independently(settings.kafka_bootstrap, topic, records, max_request_size=2_000_000)

    app = _app(schemas)
    config = ConsumerConfig.load(app=app, group=group, topics=topic, handler_retries=0, batch_wait_ms=50)
    runtime = ThreadedRuntime(app, config).start()
    try:
        wait_for(lambda: runtime.ok() and committed(settings.kafka_bootstrap, group, topic, 1) == {0: len(records)}, 60,
                 f"the partition committed to its end ({len(records)})")
        assert runtime.ok()  # the consumer is still running
    finally:
        runtime.stop()

    letters = read_all(settings.kafka_bootstrap, f"{topic}.dlq", expect=len(expected))
    by_offset = {int(dict(m.headers())["postbox.origin.offset"]): dict(m.headers()) for m in letters}
    assert set(by_offset) == set(expected), {o: h["postbox.error"] for o, h in by_offset.items()}
    report = []
    for offset, (name, cls, fragment) in expected.items():
        error = by_offset[offset]["postbox.error"].decode()
        report.append(f"{name:<32} {by_offset[offset]['postbox.error.class'].decode():<24} {error[:100]}")
        assert by_offset[offset]["postbox.error.class"].decode() == cls, (name, error)
        assert fragment in error, (name, error)
    print("\n" + "\n".join(report))
    assert [int(x) for x in redis_client.lrange(f"{{{agg}:a}}:seq", 0, -1)] == good
    assert redis_client.hgetall(f"{{{agg}:a}}:invoice:i1") == {b"due_days": b"14", b"currency": b"EUR"}  # default filled
    assert not redis_client.exists(f"{{{agg}:a}}:invoice:i2")

    # #12.13: the ids the consumer accepted are ids for trace and dlq too.
    env = {**os.environ, "POSTBOX_KAFKA_BOOTSTRAP": settings.kafka_bootstrap, "COLUMNS": "200"}
    trace = subprocess.run([sys.executable, "-m", "postbox", "trace", stock_id, "--group", group, "--json"], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=120)
    assert trace.returncode == 0, trace.stdout + trace.stderr
    found = json.loads(trace.stdout)
    assert found["kafka"]["record"]["offset"] == len(records) - 2 and found["status"] == "applied", found
    show = subprocess.run([sys.executable, "-m", "postbox", "dlq", "show", stock_failed_id, "--topic", topic, "--json"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert show.returncode == 0, show.stdout + show.stderr
    assert [d["event_id"] for d in json.loads(show.stdout)["dead_letters"]] == [stock_failed_id]
    replay = subprocess.run([sys.executable, "-m", "postbox", "dlq", "replay", "--topic", topic, "--event-id", stock_failed_id, "--json"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    (item,) = json.loads(replay.stdout)["items"]
    assert item["event_id"] == stock_failed_id
    # a later event of aggregate "a" was applied after it: the copy would follow it (held for --force)
    assert replay.returncode == 1 and item["status"] == "unsafe" and "later event(s) of aggregate 'a'" in item["reason"], replay.stdout
    redis_client.delete(f"{{{agg}:a}}:seq", f"{{{agg}:a}}:count", f"{{{agg}:a}}:invoice:i1", f"postbox:failures:{group}")
