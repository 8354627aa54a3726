"""#16.4 trace context: with OpenTelemetry's SDK installed, the consumer starts one CONSUMER span per
event, a child of the ``traceparent`` the writer captured (checked with the SDK's in-memory
exporter: parent span id and trace id equal the header's); without OpenTelemetry importable, a real
`postbox consume` process handles the same kind of events and its log lines still carry the trace id."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from postbox.consumer import App, ConsumerConfig
from postbox.effects import Effects
from postbox.events import Event
from tests.apps.counting import record
from tests.support.consumers import ROOT, ThreadedRuntime, committed, create_topic, produce, router_headers, wait_for

pytestmark = pytest.mark.integration

app = App(require_schemas=False)


@app.handler("*", "Counted")
def counted(event: Event, fx: Effects) -> None:
    record(event, fx)


def _traceparent() -> tuple[str, str, str]:
    trace_id, span_id = uuid.uuid4().hex, uuid.uuid4().hex[:16]
    return f"00-{trace_id}-{span_id}-01", trace_id, span_id


def _records(agg: str, parents: list[str]) -> list[tuple]:
    out = []
    for i, parent in enumerate(parents):
        headers = [(k, v) for k, v in router_headers(str(uuid.uuid4()), "Counted", agg) if k != "traceparent"]
        out.append((b"a1", json.dumps({"seq": i}).encode(), headers + [("traceparent", parent.encode())], 0))
    return out


def _exporter() -> InMemorySpanExporter:
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):  # the first test of the process to need one sets it
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


def test_a_span_per_event_is_a_child_of_the_writers_traceparent(settings, redis_client, unique):
    agg = f"otel{unique}"
    topic = f"outbox.event.{agg}"
    group = f"test-otel-{unique}"
    create_topic(settings.kafka_bootstrap, topic, 1)
    parents = [_traceparent() for _ in range(3)]
    produce(settings.kafka_bootstrap, topic, _records(agg, [p[0] for p in parents]))
    exporter = _exporter()
    runtime = ThreadedRuntime(app, ConsumerConfig.load(group=group, topics=topic)).start()
    try:
        wait_for(lambda: runtime.ok() and committed(settings.kafka_bootstrap, group, topic, 1)[0] == 3, 60, "3 committed")
    finally:
        runtime.stop()
    finished = exporter.get_finished_spans()
    spans = [s for s in finished if s.attributes.get("messaging.destination.name") == topic]
    applies = {s.context.trace_id: s for s in finished
               if s.attributes.get("messaging.consumer.group.name") == group and s.name.endswith(" apply")}
    assert len(spans) == 3
    for span, (_, trace_id, span_id) in zip(sorted(spans, key=lambda s: s.attributes["messaging.kafka.offset"]), parents):
        assert span.parent is not None and span.parent.is_remote
        assert span.parent.span_id == int(span_id, 16) and span.context.trace_id == int(trace_id, 16)
        assert span.kind is trace.SpanKind.CONSUMER and span.name == f"{agg}.Counted process"
        assert span.attributes["messaging.consumer.group.name"] == group
        apply = applies[int(trace_id, 16)]  # the trace reaches the Redis apply: a span under the same parent
        assert apply.parent.span_id == int(span_id, 16) and apply.attributes["postbox.apply.result"] == "applied"
        assert apply.attributes["messaging.message.id"] == span.attributes["messaging.message.id"]
    redis_client.delete(f"{{{agg}:a1}}:seq", f"{{{agg}:a1}}:count")


BLOCK_OTEL = "import sys; sys.modules['opentelemetry'] = None; from postbox.cli import main; main()"


def test_without_opentelemetry_events_are_handled_and_logs_keep_the_trace_id(settings, redis_client, unique, tmp_path):
    agg = f"nootel{unique}"
    topic = f"outbox.event.{agg}"
    group = f"test-nootel-{unique}"
    create_topic(settings.kafka_bootstrap, topic, 1)
    parent, trace_id, _ = _traceparent()
    produce(settings.kafka_bootstrap, topic, _records(agg, [parent]))
    env = {"POSTBOX_REDIS_URL": settings.redis_url, "POSTBOX_KAFKA_BOOTSTRAP": settings.kafka_bootstrap, "PYTHONUNBUFFERED": "1"}
    log_path = tmp_path / "consume.log"
    with log_path.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", BLOCK_OTEL, "consume", "tests.apps.lifecycle:app", "--group", group,
                                 "--topics", topic, "--log-format", "json"], cwd=ROOT, env={**os.environ, **env},
                                stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
        try:
            wait_for(lambda: proc.poll() is None and committed(settings.kafka_bootstrap, group, topic, 1)[0] == 1, 60, "1 committed")
        finally:
            proc.terminate()
            assert proc.wait(timeout=30) == 0
    lines = [json.loads(line) for line in log_path.read_text().splitlines() if line.startswith("{")]
    handled = [r for r in lines if r["logger"] == "shop.lifecycle_test"]
    assert handled and all(r["trace_id"] == trace_id for r in handled)
    assert redis_client.hget(f"{{{agg}:a1}}:count", "n") == b"1"
    redis_client.delete(f"{{{agg}:a1}}:count")
