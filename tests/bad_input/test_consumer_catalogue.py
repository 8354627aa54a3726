"""The bad-input catalogue, consumer side: one partition carrying a good event between every bad
record. Each bad record gets a specific error naming what and where, the right class (dead letter
here; Redis OOM in test_redis_maxmemory.py is the transient one), leaves no partial effect, and the
partition keeps moving (every good event applied, in order, and the offset committed to the end).
Cases covered elsewhere are listed in docs/guarantees.md with their tests."""

from __future__ import annotations

import json
import os
import uuid

import pytest

from postbox.codec import AvroCodec
from postbox.consumer import ConsumerConfig
from postbox.schemas import SchemaRepository
from tests.bad_input.apps import INJECTIONS, app
from tests.support.consumers import ThreadedRuntime, committed, create_topic, produce, read_all, router_headers, wait_for
from tests.support.redis_servers import RedisServer

pytestmark = pytest.mark.integration


def _avro_order() -> bytes:
    from datetime import datetime, timezone

    codec = AvroCodec(SchemaRepository.default())
    schema = codec.schema_for("order", "OrderPlaced", None)
    return codec.encode_with(schema, {"order_id": "o", "customer_id": "c", "total_cents": 1,
                                      "placed_at": datetime(2024, 1, 1, tzinfo=timezone.utc),
                                      "items": [{"sku": "s", "quantity": 1, "unit_price_cents": 1}]})


def test_every_bad_record_is_dead_lettered_with_its_reason_and_the_partition_moves_on(settings, redis_client, unique):
    agg = f"bad{unique}"
    topic = f"outbox.event.{agg}"
    group = f"test-bad-{unique}"
    create_topic(settings.kafka_bootstrap, topic, partitions=1)
    redis_client.set(f"{{{agg}:a}}:str", "a string, not a hash")
    avro = _avro_order()
    assert avro[:2] == b"\xc3\x01"
    unknown_fp = b"\xc3\x01" + os.urandom(8) + avro[10:]

    def headers(event_type: str, event_id: str | None = None, *, id_header: bytes | None | str = "auto"):
        h = router_headers(event_id or str(uuid.uuid4()), event_type, agg)
        if id_header != "auto":
            h = [(k, v) for k, v in h if k != "id"] + ([("id", id_header)] if id_header is not None else [])
        return h

    cases = {  # name → (value, headers, expected class, fragment of the error)
        "not Avro, not JSON": (b"\x00\x01\x02 not an event", headers("Counted"), "DecodeError", "JSON"),
        "unknown fingerprint": (unknown_fp, headers("OrderPlaced"), "DecodeError", "fingerprint"),
        "Avro of a type with no schema here": (unknown_fp, headers("Mystery"), "UnknownEventType", "no schema for event type 'Mystery'"),
        "truncated Avro body": (avro[: len(avro) // 2], headers("OrderPlaced"), "DecodeError", "OrderPlaced"),
        "JSON that is not JSON": (b'{"seq": 1,', headers("Counted"), "DecodeError", "JSON"),
        "missing id header": (b'{"seq": 1}', headers("Counted", id_header=None), "DecodeError", "no 'id' header"),
        "malformed id header": (b'{"seq": 1}', headers("Counted", id_header=b"not an id\r\n"), "DecodeError", "malformed 'id' header"),
        "unknown event type": (b'{"seq": 1}', headers("Mystery"), "UnknownEventType", "Mystery"),
        "handler raises": (b'{"seq": 1}', headers("Boom"), "HandlerError:ValueError", "boom on"),
        "WRONGTYPE at command 3 of 5": (b'{"seq": 1000}', headers("FiveCommands"), "EffectFailed:WRONGTYPE", "command 2"),
    }
    records, expected_dlq, good_seqs = [], {}, []
    seq = 0
    for name, (value, hdrs, cls, fragment) in cases.items():
        seq += 1
        good_seqs.append(seq)
        records.append((b"a", json.dumps({"seq": seq}).encode(), headers("Counted"), 0))
        records.append((b"a", value, hdrs, 0))
        expected_dlq[len(records) - 1] = (name, cls, fragment)
    produce(settings.kafka_bootstrap, topic, records)

    runtime = ThreadedRuntime(app, ConsumerConfig.load(group=group, topics=topic, handler_retries=1, batch_wait_ms=50)).start()
    try:
        wait_for(lambda: runtime.ok() and committed(settings.kafka_bootstrap, group, topic, 1) == {0: len(records)}, 60,
                 f"the partition committed to its end ({len(records)})")
    finally:
        runtime.stop()

    # The partition kept moving: every good event, in order, once; nothing of a bad one.
    assert [int(x) for x in redis_client.lrange(f"{{{agg}:a}}:seq", 0, -1)] == good_seqs
    assert redis_client.hget(f"{{{agg}:a}}:count", "n") == str(len(good_seqs)).encode()
    assert redis_client.get(f"{{{agg}:a}}:str") == b"a string, not a hash"
    for key in ("set", "counter"):  # commands 4 and 5 of FiveCommands never ran; 1 and 2 were undone
        assert not redis_client.exists(f"{{{agg}:a}}:{key}")

    # Each bad record: in the DLQ with its class and a reason naming what and where.
    dlq = read_all(settings.kafka_bootstrap, f"{topic}.dlq", expect=len(expected_dlq))
    by_offset = {int(dict(m.headers())["postbox.origin.offset"]): dict(m.headers()) for m in dlq}
    assert set(by_offset) == set(expected_dlq), {o: h["postbox.error"] for o, h in by_offset.items()}
    report = []
    for offset, (name, cls, fragment) in expected_dlq.items():
        h = by_offset[offset]
        error = h["postbox.error"].decode()
        report.append(f"{name:<28} {h['postbox.error.class'].decode():<24} {error[:110]}")
        assert h["postbox.error.class"].decode() == cls, (name, error)
        assert fragment.lower() in error.lower(), (name, error)
        assert h["postbox.error.kind"] == b"permanent"
        assert h["postbox.origin.topic"].decode() == topic
    print("\n" + "\n".join(report))
    m = runtime.metrics
    assert m.total("postbox_consumer_dead_lettered_total") == len(expected_dlq)
    redis_client.delete(*[f"{{{agg}:a}}:{p}" for p in ("seq", "count", "str")], f"postbox:failures:{group}")


def test_injection_strings_are_stored_verbatim_by_a_consumer_without_an_acl(settings, unique):
    """Keys and values that would flush or write Redis if anything built Lua or RESP by
    concatenation are stored verbatim. The consumer runs as an unrestricted user on a Redis of its
    own, so no ACL refuses the FLUSHALL/SET they smuggle: only the engine's quoting stands between
    them and the data (the shared stack's consumer user would be refused anyway).

    Shown to fail: with the Injection handler also issuing the FLUSHALL it smuggles (scratch edit,
    ``fx.call`` of a Lua function running ``redis.call('FLUSHALL')``, not committed) the canary key
    and the stored strings were gone."""
    agg = f"inj{unique}"
    topic = f"outbox.event.{agg}"
    group = f"test-inj-{unique}"
    create_topic(settings.kafka_bootstrap, topic, partitions=1)
    server = RedisServer().start()  # no ACL: the default user may run anything
    client = server.client()
    try:
        client.set("canary", "still here")
        produce(settings.kafka_bootstrap, topic, [(b"a", json.dumps({"seq": 1}).encode(), router_headers(str(uuid.uuid4()), "Injection", agg), 0)])
        config = ConsumerConfig.load(group=group, topics=topic, redis_url=server.url, batch_wait_ms=20)
        runtime = ThreadedRuntime(app, config).start()
        try:
            wait_for(lambda: runtime.ok() and committed(settings.kafka_bootstrap, group, topic, 1) == {0: 1}, 60, "the event committed")
        finally:
            runtime.stop()
        assert runtime.metrics.total("postbox_consumer_events_applied_total") == 1
        assert client.get("canary") == b"still here"  # FLUSHALL never ran
        assert not client.exists("pwned")  # neither did the smuggled SET
        inj = {k.decode("utf-8", "surrogateescape"): v for k, v in client.hgetall(f"{{{agg}:a}}:inj").items()}
        assert set(inj) == set(INJECTIONS) and all(k.encode("utf-8", "surrogateescape") == v for k, v in inj.items())
        for i, text in enumerate(INJECTIONS):
            assert client.get(f"{{{agg}:a}}:inj:{i}:{text}".encode("utf-8", "surrogateescape")) == text.encode("utf-8", "surrogateescape")
    finally:
        client.close()
        server.stop()
