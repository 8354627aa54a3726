"""Benchmark: the consumer runtime next to a raw Kafka read and a naive consumer, on one topic.

    python bench/consumer.py [--quick] [--events N] [--naive-events N] [--redis-url URL]

Produces N router-like records (Avro ``OrderPlaced`` payloads, key = one of 1,000 aggregate ids,
headers ``id``/``event_type``/``aggregate_type``/``created_at``/``traceparent``) straight to a fresh
3-partition bench topic (no Debezium in the loop), then measures, in one run, on that topic:

- ``raw``: confluent-kafka ``consume(1000)`` with nothing done per record (the ceiling);
- ``runtime``: this runtime (decode, dispatch, one HINCRBY per event with dedupe, one
  ``engine.apply`` and one async commit per batch, DLQ path idle), default settings;
- ``naive``: one record at a time — decode, handler, one EVALSHA of the same apply script, one
  synchronous offset commit — over the first ``--naive-events`` records;
- ``engine``: the effects engine alone (``EffectsEngine.apply``) on the same Redis, fed the same
  events (read, decoded and run through the handler before the clock starts) in batches of the
  runtime's batch size: the ceiling a consumer can reach here;
- ``workers_1``, ``workers_2``: ``postbox consume --workers N`` as a user runs it (N group members
  under one supervisor, in their own processes), observed through their Prometheus endpoints only
  (``bench/consumer_workers.py``);
- ``peer``: what a competent engineer writes without postbox — confluent-kafka ``consume(500)``,
  fastavro decoding, one redis-py pipeline per batch with a ``SET NX EX`` marker and the same
  HINCRBY per event (not atomic: the HINCRBY runs whatever the SET answered), async commit.

Every contender runs ``--rounds`` times (default 3, quick 1), side by side in each round, and the
table and the JSON give the medians (the ratios are ratios of medians; the per-round ratios and the
load average before and after are in the JSON too: on a shared machine the load moves under a
run). Each rate counts from the first record received to the last one done (group join excluded). Redis
is a redis-server of the bench's own (``appendonly yes``, ``appendfsync always``) unless
``--redis-url`` is given. Exits 1 when a contender counted fewer events than it was given
(``bench/counting.py``). Prints a table, then as its LAST line one JSON object with
``raw_per_s``, ``runtime_per_s``, ``naive_per_s``, ``engine_per_s``, ``peer_per_s``,
``runtime_vs_raw``, ``runtime_vs_naive``, ``runtime_vs_engine`` and ``runtime_vs_peer``,
``workers_1_per_s``, ``workers_2_per_s``, ``workers_2_vs_1`` and ``runtime_vs_engine_workers_1`` /
``_workers_2`` (the worker processes' rate over the engine's), plus
``rounds``, the per-round ratios and ``load_before``/``load_after``, and CPU per event (µs, medians;
steadier than rates on a shared machine): ``runtime_cpu_us_per_event`` (the runtime's process, the
bench thread's own work left out), ``runtime_loop_cpu_us_per_event`` (its loop thread: decode,
handlers, bookkeeping), ``runtime_apply_cpu_us_per_event`` (its apply worker threads,
``postbox-apply*``: the engine's packing, sending and reply decoding, GIL-holding time the loop
thread waits for), ``engine_cpu_us_per_event`` (the engine alone) and
``runtime_overhead_cpu_us_per_event`` (runtime less engine: what the runtime adds), and the Redis
server's main-thread CPU per event while each of runtime, engine and peer ran
(``runtime_redis_cpu_us_per_event``, ``engine_redis_cpu_us_per_event``, ``peer_redis_cpu_us_per_event``:
with ``--redis-url`` whatever else that server does is counted too).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import threading
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: tests.support

from confluent_kafka import Consumer, Message, Producer  # noqa: E402
from fastavro import parse_schema, schemaless_reader  # noqa: E402
from fastavro.schema import fingerprint, to_parsing_canonical_form  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from postbox.codec import AvroCodec, decode_record  # noqa: E402
from postbox.consumer import App, ConsumerConfig, ConsumerRuntime  # noqa: E402
from postbox.effects import Effects, EffectsEngine, EventRef, aggregate_keys  # noqa: E402
from postbox.events import Event  # noqa: E402
from postbox.settings import Settings  # noqa: E402
from tests.support.redis_servers import RedisServer  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from counting import Tally, require_full_counts  # noqa: E402
from consumer_workers import run_workers  # noqa: E402

AGGREGATES = 1000
#: Four, so two workers get two partitions each (with three, one worker does two thirds).
PARTITIONS = 4
ROOT = Path(__file__).resolve().parents[1]
#: One tally per contender and round: events it was given vs events it counted (bench/counting.py).
TALLIES: list[Tally] = []
#: The peer's marker lifetime (the runtime's default marker TTL: 8 days).
PEER_MARKER_TTL_S = 8 * 24 * 3600
#: How often the bench looks at the runtime's counters (the rate's resolution; see run_runtime).
POLL_S = 0.01


def make_app() -> App:
    # The bench's "benchorder" events carry order/OrderPlaced's schema (found by fingerprint), so
    # no schemas/benchorder/ exists for the start-up check to find.
    app = App("bench", require_schemas=False)

    @app.handler("benchorder", "OrderPlaced")
    def placed(event: Event, fx: Effects) -> None:
        fx.hincrby(aggregate_keys("benchorder", event.aggregate_id)("totals"), "cents", event.payload["total_cents"])

    return app


def fill_topic(bootstrap: str, topic: str, n: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])[topic].result(timeout=30)
    codec = AvroCodec()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000, "acks": "all",
                         "queue.buffering.max.messages": 1_000_000})
    now = datetime.now(timezone.utc)
    created = now.isoformat().replace("+00:00", "Z").encode()
    for i in range(n):
        order_id = f"o{i % AGGREGATES}"
        value = codec.encode("order", "OrderPlaced", {
            "order_id": order_id, "customer_id": "c", "total_cents": i % 100, "placed_at": now,
            "items": [{"sku": "sku-1", "quantity": 1, "unit_price_cents": i % 100}],
        })
        headers = [("id", str(uuid.uuid4()).encode()), ("event_type", b"OrderPlaced"), ("aggregate_type", b"benchorder"),
                   ("created_at", created), ("traceparent", b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")]
        while True:
            try:
                producer.produce(topic, value=value, key=order_id.encode(), headers=headers)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(60):
        raise SystemExit("bench: could not produce the records")


def run_raw(bootstrap: str, topic: str, n: int) -> float:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-raw-{uuid.uuid4().hex}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    count, start = 0, None
    deadline = time.monotonic() + 120
    try:
        while count < n and time.monotonic() < deadline:
            msgs = consumer.consume(1000, 0.5)
            if msgs and start is None:
                start = time.perf_counter()
            count += sum(1 for m in msgs if m.error() is None)
        TALLIES.append(Tally("consumer raw: records read", n, count))
        return count / (time.perf_counter() - start)
    finally:
        consumer.close()


def run_runtime(bootstrap: str, redis_url: str, topic: str, n: int) -> tuple[float, ConsumerRuntime, dict[str, float]]:
    """The runtime's rate, and its CPU per event over the same window (µs): ``runtime`` the whole
    process's less the bench thread's own (Kafka client threads included), ``runtime_loop`` its
    loop thread's (decode, handlers, bookkeeping; the rest is mostly the apply worker's engine
    work). CPU figures move far less with the load of a shared machine than rates do."""
    app = make_app()
    config = ConsumerConfig.load({}, app=app, group=f"bench-runtime-{uuid.uuid4().hex}", topics=topic,
                                 kafka_bootstrap=bootstrap, redis_url=redis_url)
    runtime = ConsumerRuntime(app, config, install_signals=False)
    thread = threading.Thread(target=runtime.run, daemon=True)
    thread.start()
    m = runtime.metrics
    start = None
    cpu0 = (0.0, 0.0, 0.0)
    apply0: dict[int, float] = {}
    deadline = time.monotonic() + 300
    try:
        # Three counters read every POLL_S (see _progress): the probe must not take the GIL from the
        # runtime it measures.
        while time.monotonic() < deadline:
            consumed, done = _progress(m)
            if start is None and consumed > 0:
                start = time.perf_counter()
                cpu0 = _cpu_now(thread)
                apply0 = _apply_cpu()
            if done >= n:
                break
            time.sleep(POLL_S)
        elapsed = time.perf_counter() - (start or time.perf_counter())
        process, bench, loop = (b - a for a, b in zip(cpu0, _cpu_now(thread)))
        apply = sum(cpu - apply0.get(ident, 0.0) for ident, cpu in _apply_cpu().items())  # a worker started later: all of it
        done = m.total("postbox_consumer_events_applied_total")
    finally:
        runtime.stop()
        thread.join(60)
    TALLIES.append(Tally("consumer runtime: events applied", n, int(done)))
    return n / elapsed, runtime, {"runtime": (process - bench) * 1e6 / n, "runtime_loop": loop * 1e6 / n, "runtime_apply": apply * 1e6 / n}


def _cpu_now(thread: threading.Thread) -> tuple[float, float, float]:
    """(process CPU, this thread's CPU, ``thread``'s CPU) in seconds."""
    assert thread.ident is not None
    return time.process_time(), time.thread_time(), time.clock_gettime(time.pthread_getcpuclockid(thread.ident))


def _apply_cpu() -> dict[int, float]:
    """CPU seconds of each live apply worker thread (``postbox-apply*``), by thread id."""
    return {t.ident: time.clock_gettime(time.pthread_getcpuclockid(t.ident))
            for t in threading.enumerate() if t.name.startswith("postbox-apply") and t.ident is not None}


def _redis_cpu(client: redis.Redis) -> float:
    """CPU seconds the Redis server's main thread has used (commands, scripts and, with appendfsync
    always, the AOF write and fsync); the whole process's on a server without the per-thread figures."""
    cpu = client.info("cpu")
    if "used_cpu_user_main_thread" in cpu:
        return float(cpu["used_cpu_user_main_thread"]) + float(cpu["used_cpu_sys_main_thread"])
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def _progress(m) -> tuple[float, float]:
    """(records consumed, records applied or skipped as duplicates) of the runtime, in one pass.

    Only the three counters it needs: a pass over the whole registry also runs the process
    collector (it reads /proc), which held the GIL for ~30% of the runtime's wall time (py-spy)."""
    consumed = done = 0.0
    for counter in (m.consumed, m.applied, m.duplicates):
        for metric in counter.collect():
            for sample in metric.samples:
                if sample.name.endswith("_total"):
                    if counter is m.consumed:
                        consumed += sample.value
                    else:
                        done += sample.value
    return consumed, done


def run_naive(bootstrap: str, client: redis.Redis, topic: str, n: int) -> float:
    app = make_app()
    engine = EffectsEngine(client, f"bench-naive-{uuid.uuid4().hex[:8]}")
    engine.load()
    codec = AvroCodec()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-naive-{uuid.uuid4().hex}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    count, start = 0, None
    deadline = time.monotonic() + 120
    try:
        while count < n and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            if start is None:
                start = time.perf_counter()
            event, fx = handled(msg, codec, app)
            if engine.apply_one(app.event_ref(event), fx).applied:
                count += 1
            consumer.commit(message=msg, asynchronous=False)
        TALLIES.append(Tally("consumer naive: events applied", n, count))
        return count / (time.perf_counter() - start)
    finally:
        consumer.close()


def handled(msg: Message, codec: AvroCodec, app: App) -> tuple[Event, Effects]:
    """One record decoded the plain way (no postbox runtime) and run through the handler: the
    per-event work the naive loop and the engine-alone input share."""
    headers = msg.headers()
    decoded = decode_record(msg.value(), headers, codec=codec)
    meta = {k: v.decode() for k, v in headers}
    event = Event(id=meta["id"], aggregate_type=meta["aggregate_type"], aggregate_id=msg.key().decode(),
                  event_type=decoded.event_type or meta["event_type"], payload=decoded.payload)
    fx = Effects()
    app(event, fx)
    return event, fx


def read_events(bootstrap: str, topic: str, n: int, app: App) -> list[tuple[EventRef, Effects]]:
    """Every record of the topic decoded and run through the handler (for the engine-alone run)."""
    codec = AvroCodec()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-engine-{uuid.uuid4().hex}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    out: list[tuple[EventRef, Effects]] = []
    deadline = time.monotonic() + 120
    try:
        while len(out) < n and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                if msg.error():
                    continue
                event, fx = handled(msg, codec, app)
                out.append((app.event_ref(event), fx))
    finally:
        consumer.close()
    TALLIES.append(Tally("consumer engine input: records read and handled", n, len(out)))
    return out


def run_engine(client: redis.Redis, events: list[tuple[EventRef, Effects]], batch_size: int) -> float:
    """The effects engine alone: ``apply`` + the durability check per batch, as the runtime does."""
    engine = EffectsEngine(client, f"bench-engine-{uuid.uuid4().hex[:8]}")
    engine.load()
    applied = 0
    start = time.perf_counter()
    for i in range(0, len(events), batch_size):
        applied += sum(1 for r in engine.apply(events[i : i + batch_size]) if r.applied)
        engine.durability()
    elapsed = time.perf_counter() - start
    TALLIES.append(Tally("consumer engine: events applied", len(events), applied))
    return len(events) / elapsed


def _peer_schemas() -> dict[bytes, object]:
    """Writer schemas by their single-object fingerprint (what the peer reads the header with)."""
    schemas = {}
    for path in sorted((ROOT / "schemas" / "order").glob("*.avsc")):
        parsed = parse_schema(json.loads(path.read_text()))
        schemas[bytes.fromhex(fingerprint(to_parsing_canonical_form(parsed), "CRC-64-AVRO"))] = parsed
    return schemas


def run_peer(bootstrap: str, client: redis.Redis, topic: str, n: int) -> float:
    """A hand-tuned loop without postbox: see the module docs (not atomic, deduplicated by SET NX)."""
    import io

    schemas = _peer_schemas()
    group = f"bench-peer-{uuid.uuid4().hex[:8]}"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    count, start = 0, None
    deadline = time.monotonic() + 300
    try:
        while count < n and time.monotonic() < deadline:
            msgs = consumer.consume(500, 0.5)
            if not msgs:
                continue
            if start is None:
                start = time.perf_counter()
            pipe = client.pipeline(transaction=False)
            for msg in msgs:
                if msg.error():
                    continue
                value = msg.value()
                payload = schemaless_reader(io.BytesIO(value[10:]), schemas[value[2:10]], None)
                event_id = next(v for k, v in msg.headers() if k == "id")
                pipe.set(b"peer:seen:" + group.encode() + b":" + event_id, b"1", nx=True, ex=PEER_MARKER_TTL_S)
                pipe.hincrby(b"peer:{benchorder:" + msg.key() + b"}:totals", "cents", payload["total_cents"])
                count += 1
            pipe.execute()
            consumer.commit(asynchronous=True)
        TALLIES.append(Tally("consumer peer: records applied", n, count))
        return count / (time.perf_counter() - (start or time.perf_counter()))
    finally:
        consumer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="20,000 events, 1,000 naive")
    parser.add_argument("--events", type=int, default=None, help="records on the topic (default 100,000; quick 20,000)")
    parser.add_argument("--naive-events", type=int, default=None, help="records the naive consumer handles (default 3,000)")
    parser.add_argument("--redis-url", default=None, help="use this Redis instead of a redis-server of the bench's own")
    parser.add_argument("--kafka-bootstrap", default=None)
    parser.add_argument("--rounds", type=int, default=None, help="rounds of every contender, medians reported (default 3; quick 1)")
    args = parser.parse_args()
    n = args.events or (20_000 if args.quick else 100_000)
    args.rounds = args.rounds or (1 if args.quick else 3)
    naive_n = min(n, args.naive_events or (1_000 if args.quick else 3_000))
    settings = Settings.load(kafka_bootstrap=args.kafka_bootstrap)
    server = None if args.redis_url else RedisServer().start()
    redis_url = args.redis_url or server.url  # type: ignore[union-attr]
    client = redis.Redis.from_url(redis_url)
    topic = f"bench.consumer.{uuid.uuid4().hex[:10]}"
    try:
        info = client.info("server")
        cfg = {k.decode() if isinstance(k, bytes) else k: (v.decode() if isinstance(v, bytes) else v)
               for k, v in client.config_get("append*").items()}
        print(f"redis {info['redis_version']} at {redis_url}, appendonly {cfg.get('appendonly')}, appendfsync {cfg.get('appendfsync')}; "
              f"kafka {settings.kafka_bootstrap}; topic {topic} ({PARTITIONS} partitions)")
        started = time.perf_counter()
        fill_topic(settings.kafka_bootstrap, topic, n)
        print(f"produced {n:,} records in {time.perf_counter() - started:.1f} s")
        events = read_events(settings.kafka_bootstrap, topic, n, make_app())  # the engine's input, decoded once
        # Frozen out of the collector: n (EventRef, Effects) pairs alive through every round would
        # otherwise make each full collection during the other contenders walk them — a bench
        # artifact weighing most on the contender that allocates the most (the runtime).
        gc.collect()
        gc.freeze()
        load_before = os.getloadavg()[0]
        rounds: list[dict[str, float]] = []
        cpus: list[dict[str, float]] = []  # CPU µs per event of the runtime (whole, loop thread) and the engine alone
        for number in range(1, args.rounds + 1):  # side by side, so a change of load hits every contender
            rates: dict[str, float] = {"raw": run_raw(settings.kafka_bootstrap, topic, n)}
            redis_cpu = _redis_cpu(client)
            rates["runtime"], runtime, cpu = run_runtime(settings.kafka_bootstrap, redis_url, topic, n)
            cpu["runtime_redis"], redis_cpu = (_redis_cpu(client) - redis_cpu) * 1e6 / n, _redis_cpu(client)
            for workers in (1, 2):
                rates[f"workers_{workers}"] = run_workers(settings.kafka_bootstrap, redis_url, topic, n, workers, TALLIES)
            redis_cpu = _redis_cpu(client)
            engine_cpu = time.process_time()
            rates["engine"] = run_engine(client, events, runtime.config.batch_size)
            cpu["engine"] = (time.process_time() - engine_cpu) * 1e6 / n
            cpu["engine_redis"], redis_cpu = (_redis_cpu(client) - redis_cpu) * 1e6 / n, _redis_cpu(client)
            rates["peer"] = run_peer(settings.kafka_bootstrap, client, topic, n)
            cpu["peer_redis"] = (_redis_cpu(client) - redis_cpu) * 1e6 / n
            cpus.append(cpu)
            rates["naive"] = run_naive(settings.kafka_bootstrap, client, topic, naive_n)
            rounds.append(rates)
            print(f"round {number}: " + ", ".join(f"{k} {v:,.0f}/s" for k, v in rates.items()) + f" (load {os.getloadavg()[0]:.1f})")
        del events
        load_after = os.getloadavg()[0]
        med = {name: statistics.median(r[name] for r in rounds) for name in rounds[0]}
        cpu_med = {name: statistics.median(c[name] for c in cpus) for name in cpus[0]}
        raw, runtime_rate, naive = med["raw"], med["runtime"], med["naive"]
        batches = runtime.metrics.registry.get_sample_value("postbox_consumer_batch_size_count", {"group": runtime.config.group}) or 0
        print()
        print(f"medians of {len(rounds)} round(s); 1-minute load average {load_before:.1f} before, {load_after:.1f} after ({os.cpu_count()} CPUs)")
        print(f"{'consumer':<10}{'events':>10}{'events/s':>12}{'vs raw':>9}{'vs naive':>10}{'runtime vs':>12}")
        for name in ("raw", "runtime", "workers_1", "workers_2", "engine", "peer", "naive"):
            rate, count = med[name], naive_n if name == "naive" else n
            print(f"{name:<10}{count:>10,}{rate:>12,.0f}{rate / raw:>9.1%}{rate / naive:>9.1f}x{runtime_rate / rate:>11.2f}x")
        print(f"postbox consume --workers 2 vs --workers 1: {med['workers_2'] / med['workers_1']:.2f}x; "
              f"vs the engine alone: {med['workers_1'] / med['engine']:.2f} (1 worker), {med['workers_2'] / med['engine']:.2f} (2 workers)")
        print(f"runtime: batch_size {runtime.config.batch_size}, {batches:.0f} batches in its last round (mean {n / max(batches, 1):.0f} records)")
        print(f"CPU per event (medians): runtime {cpu_med['runtime']:.1f} us (its loop thread {cpu_med['runtime_loop']:.1f} us, its apply worker {cpu_med['runtime_apply']:.1f} us), "
              f"engine alone {cpu_med['engine']:.1f} us; the runtime's own {cpu_med['runtime'] - cpu_med['engine']:.1f} us")
        print(f"Redis CPU per event (medians; its main thread, AOF fsync included): runtime {cpu_med['runtime_redis']:.1f} us, "
              f"engine alone {cpu_med['engine_redis']:.1f} us, peer {cpu_med['peer_redis']:.1f} us")
        print(json.dumps({
            "events": n,
            "naive_events": naive_n,
            "rounds": len(rounds),
            "raw_per_s": round(raw),
            "runtime_per_s": round(runtime_rate),
            "naive_per_s": round(naive),
            "runtime_vs_raw": round(runtime_rate / raw, 4),
            "runtime_vs_naive": round(runtime_rate / naive, 2),
            "engine_per_s": round(med["engine"]),
            "peer_per_s": round(med["peer"]),
            "runtime_vs_engine": round(runtime_rate / med["engine"], 3),
            "runtime_vs_peer": round(runtime_rate / med["peer"], 3),
            "workers_1_per_s": round(med["workers_1"]),
            "workers_2_per_s": round(med["workers_2"]),
            "workers_2_vs_1": round(med["workers_2"] / med["workers_1"], 3),
            "workers_2_vs_1_per_round": [round(r["workers_2"] / r["workers_1"], 3) for r in rounds],
            "runtime_vs_engine_workers_1": round(med["workers_1"] / med["engine"], 3),
            "runtime_vs_engine_workers_2": round(med["workers_2"] / med["engine"], 3),
            "runtime_vs_engine_per_round": [round(r["runtime"] / r["engine"], 3) for r in rounds],
            "runtime_vs_peer_per_round": [round(r["runtime"] / r["peer"], 3) for r in rounds],
            "load_before": round(load_before, 1),
            "load_after": round(load_after, 1),
            "runtime_cpu_us_per_event": round(cpu_med["runtime"], 1),
            "runtime_loop_cpu_us_per_event": round(cpu_med["runtime_loop"], 1),
            "runtime_apply_cpu_us_per_event": round(cpu_med["runtime_apply"], 1),
            "engine_cpu_us_per_event": round(cpu_med["engine"], 1),
            "runtime_overhead_cpu_us_per_event": round(cpu_med["runtime"] - cpu_med["engine"], 1),
            "runtime_redis_cpu_us_per_event": round(cpu_med["runtime_redis"], 1),
            "engine_redis_cpu_us_per_event": round(cpu_med["engine_redis"], 1),
            "peer_redis_cpu_us_per_event": round(cpu_med["peer_redis"], 1),
            "batch_size": runtime.config.batch_size,
            "mean_batch": round(n / max(batches, 1), 1),
        }))
    finally:
        client.close()
        AdminClient({"bootstrap.servers": settings.kafka_bootstrap}).delete_topics([topic])
        if server is not None:
            server.stop()
    require_full_counts(TALLIES)


if __name__ == "__main__":
    main()
