"""Acceptance: events emitted through the writer reach Redis through a handler exactly once and in
order per aggregate — across a SIGKILL in the middle of a batch, a restart, and every record of the
topic delivered a second time (re-produced with the same id, key, value and headers)."""

from __future__ import annotations

import shutil
from datetime import datetime, timezone
from pathlib import Path

import pytest

from postbox.codec import AvroCodec
from postbox.outbox import NewEvent, Outbox
from postbox.schemas import SchemaRepository
from tests.support.consumers import ConsumerProcess, committed, produce, read_all, wait_for

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
AGGREGATES = 6
PER_AGGREGATE = 40
NOW = datetime(2024, 5, 6, 7, 8, 9, tzinfo=timezone.utc)


def placed(order_id: str, seq: int) -> dict:
    return {"order_id": order_id, "customer_id": "c", "total_cents": seq, "placed_at": NOW,
            "items": [{"sku": "s", "quantity": 1, "unit_price_cents": seq}]}


def seqs(redis_client, agg: str, aggregate_id: str) -> list[int]:
    return [int(x) for x in redis_client.lrange(f"{{{agg}:{aggregate_id}}}:seq", 0, -1)]


def test_sigkill_restart_and_redelivery_apply_each_event_once_in_order(settings, pg_conn, redis_client, unique, tmp_path):
    agg = f"eo{unique}"
    topic = f"outbox.event.{agg}"
    group = f"test-eo-{unique}"
    schemas = tmp_path / "schemas"
    shutil.copytree(ROOT / "schemas" / "order", schemas / agg)
    outbox = Outbox(codec=AvroCodec(SchemaRepository.load(schemas)))
    ids = [f"o{i}" for i in range(AGGREGATES)]

    def emit(seq_range: range) -> None:
        for seq in seq_range:  # one transaction per round: every aggregate's event #seq
            with pg_conn.transaction():
                outbox.emit_many(pg_conn, [NewEvent(agg, oid, "OrderPlaced", placed(oid, seq)) for oid in ids])

    half = PER_AGGREGATE // 2
    emit(range(half))
    env = {
        "POSTBOX_GROUP": group, "POSTBOX_TOPICS": topic, "POSTBOX_SCHEMAS_DIR": str(schemas),
        "POSTBOX_BATCH_SIZE": "20", "POSTBOX_SESSION_TIMEOUT_MS": "6000", "POSTBOX_LOG_FORMAT": "json",
        "POSTBOX_REDIS_URL": settings.redis_url, "POSTBOX_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
    }
    total = lambda: sum(len(seqs(redis_client, agg, oid)) for oid in ids)  # noqa: E731
    first = ConsumerProcess("tests.apps.counting:app", {**env, "POSTBOX_TEST_SLEEP_MS": "15"}, tmp_path / "first.log")
    second = None
    try:
        wait_for(lambda: first.alive() and total() >= 30, 90, f"the first consumer to apply 30 events ({first.log_path})")
        first.kill()  # SIGKILL, in the middle of a batch of 20 (each event takes 15 ms)
        applied_before_kill = total()
        assert applied_before_kill < AGGREGATES * half, "the consumer finished before it was killed"

        # Deliver every record so far a second time: same key, value and headers (same event ids).
        originals = read_all(settings.kafka_bootstrap, topic, expect=AGGREGATES * half)
        assert len(originals) == AGGREGATES * half
        produce(settings.kafka_bootstrap, topic, [(m.key(), m.value(), m.headers(), m.partition()) for m in originals])
        emit(range(half, PER_AGGREGATE))

        second = ConsumerProcess("tests.apps.counting:app", env, tmp_path / "second.log")
        expected = list(range(PER_AGGREGATE))
        wait_for(lambda: second.alive() and all(len(seqs(redis_client, agg, oid)) >= PER_AGGREGATE for oid in ids), 120,
                 f"every event applied ({second.log_path})")
        wait_for(lambda: sum(o for o in committed(settings.kafka_bootstrap, group, topic, 3).values() if o > 0) == AGGREGATES * (PER_AGGREGATE + half),
                 60, "the whole topic (duplicates included) committed")
        assert second.terminate() == 0  # SIGTERM: graceful
        assert '"consumer stopped"' in second.output()
    finally:
        first.close()
        if second is not None:
            second.close()

    for oid in ids:
        assert seqs(redis_client, agg, oid) == expected, f"aggregate {oid}"
        assert redis_client.hget(f"{{{agg}:{oid}}}:count", "n") == str(PER_AGGREGATE).encode()
    redis_client.delete(*[f"{{{agg}:{oid}}}:{part}" for oid in ids for part in ("seq", "count")])
