"""The classic polling publisher: the baseline bench/e2e.py measures the CDC path against.

    python bench/polling_publisher.py --dsn URL [--bootstrap HOST:PORT] [--poll-interval-ms 100]
                                      [--batch-size 500] [--stats-file PATH]

The transactional outbox without change data capture, built the way the pattern is usually
described: the application inserts outbox rows in its own transaction, and a relay process, in a
loop,

1. ``BEGIN``; ``SELECT ... FROM postbox.outbox WHERE published_at IS NULL ORDER BY id LIMIT n
   FOR UPDATE SKIP LOCKED`` (a partial index holds exactly the unpublished rows);
2. produces every row to Kafka with confluent-kafka and waits for every delivery report
   (``acks=all``, idempotent producer);
3. ``UPDATE postbox.outbox SET published_at = now() WHERE id = ANY(...)``; ``COMMIT``;
4. sleeps the poll interval when the batch was not full (a full batch loops at once).

A failed delivery rolls the transaction back, so the rows stay unpublished and go again on the
next cycle (at least once, like Debezium; consumers dedupe on the event id).

The Kafka records are what Debezium's Outbox Event Router makes of the same row, so the same
consumer reads both: topic ``outbox.event.<aggregate_type>``, key ``aggregate_id`` (murmur2
partitioner, as the Java producer), value the payload bytes unchanged, headers ``id``,
``event_type``, ``aggregate_type``, ``created_at`` (ISO-8601 UTC, ``Z``) and ``traceparent``.

The table lives in a scratch database of its own (:func:`setup_database`): ``postbox.outbox`` with
the outbox columns plus ``published_at``, so rows are written by the very same writer code path
(``postbox.outbox.Outbox``). Updating ``published_at`` is what this design costs the database: one
UPDATE (a new row version, a dead tuple, its WAL) per event, plus a query per poll interval even
when idle. On SIGTERM/SIGINT the relay finishes its cycle and, with ``--stats-file``, writes its
counters as JSON.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from datetime import timezone
from pathlib import Path
from typing import Any

import psycopg
from confluent_kafka import KafkaException, Producer
from psycopg import sql
from psycopg.conninfo import make_conninfo

from postbox.topics import TOPIC_PREFIX

#: The outbox table of the polling design: postbox's columns plus the publication mark.
TABLE_DDL = """
CREATE SCHEMA IF NOT EXISTS postbox;
DROP TABLE IF EXISTS postbox.outbox;
CREATE TABLE postbox.outbox (
    id             uuid        PRIMARY KEY,
    aggregate_type text        NOT NULL,
    aggregate_id   text        NOT NULL,
    event_type     text        NOT NULL,
    payload        bytea       NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    traceparent    text,
    published_at   timestamptz
);
CREATE INDEX outbox_unpublished ON postbox.outbox (id) WHERE published_at IS NULL;
"""

SELECT_SQL = (
    "SELECT id, aggregate_type, aggregate_id, event_type, payload, created_at, traceparent "
    "FROM postbox.outbox WHERE published_at IS NULL ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED"
)
MARK_SQL = "UPDATE postbox.outbox SET published_at = now() WHERE id = ANY(%s)"


def setup_database(admin_url: str, dbname: str, app_role: str | None = "postbox_app") -> str:
    """(Re)create the polling outbox in scratch database ``dbname``; returns its admin conninfo.

    ``app_role`` (an existing role, e.g. the stack's ``postbox_app``) gets INSERT for the writer
    and SELECT/UPDATE for the relay, so both connect like the CDC path's clients do.
    """
    with psycopg.connect(admin_url, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (dbname,)).fetchone():
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
    scratch = make_conninfo(admin_url, dbname=dbname)
    with psycopg.connect(scratch, autocommit=True) as conn:
        conn.execute(TABLE_DDL)
        if app_role:
            role = sql.Identifier(app_role)
            conn.execute(sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(sql.Identifier(dbname), role))
            conn.execute(sql.SQL("GRANT USAGE ON SCHEMA postbox TO {}").format(role))
            conn.execute(sql.SQL("GRANT SELECT, INSERT, UPDATE ON postbox.outbox TO {}").format(role))
    return scratch


def router_headers(event_id: Any, event_type: str, aggregate_type: str, created_at: Any, traceparent: str | None) -> list[tuple[str, bytes | None]]:
    """The headers Debezium's Outbox Event Router puts on the record of the same row."""
    created = created_at.astimezone(timezone.utc).replace(tzinfo=None).isoformat() + "Z"
    return [
        ("id", str(event_id).encode()),
        ("event_type", event_type.encode()),
        ("aggregate_type", aggregate_type.encode()),
        ("created_at", created.encode()),
        ("traceparent", traceparent.encode() if traceparent else None),
    ]


class PollingPublisher:
    """One relay: poll, produce, wait for the acknowledgements, mark published, commit."""

    def __init__(
        self,
        dsn: str,
        bootstrap: str,
        *,
        poll_interval_ms: int = 100,
        batch_size: int = 500,
        producer_overrides: dict[str, Any] | None = None,
    ) -> None:
        self.dsn = dsn
        self.poll_interval_s = poll_interval_ms / 1000
        self.batch_size = batch_size
        self.producer = Producer({
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 1,                   # the connector's producer.override.linger.ms
            "partitioner": "murmur2_random",  # same key -> same partition as the Java producer
            **(producer_overrides or {}),
        })
        self.conn: psycopg.Connection[Any] | None = None
        self.stop_event = threading.Event()
        self.stats = {"cycles": 0, "empty_polls": 0, "published": 0, "failed_batches": 0,
                      "select_s": 0.0, "produce_s": 0.0, "mark_commit_s": 0.0}

    def connect(self) -> psycopg.Connection[Any]:
        if self.conn is None or self.conn.closed or self.conn.broken:
            self.conn = psycopg.connect(self.dsn)
        return self.conn

    def run_once(self) -> int:
        """One cycle; returns how many rows were published (0 when there was nothing to do)."""
        conn = self.connect()
        self.stats["cycles"] += 1
        t0 = time.perf_counter()
        with conn.transaction():
            rows = conn.execute(SELECT_SQL, (self.batch_size,)).fetchall()
            t1 = time.perf_counter()
            self.stats["select_s"] += t1 - t0
            if not rows:
                self.stats["empty_polls"] += 1
                return 0
            errors: list[str] = []

            def delivered(err: Any, _msg: Any) -> None:
                if err is not None:
                    errors.append(str(err))

            for event_id, aggregate_type, aggregate_id, event_type, payload, created_at, traceparent in rows:
                while True:
                    try:
                        self.producer.produce(
                            TOPIC_PREFIX + aggregate_type, value=bytes(payload), key=aggregate_id.encode(),
                            headers=router_headers(event_id, event_type, aggregate_type, created_at, traceparent),
                            on_delivery=delivered,
                        )
                        break
                    except BufferError:
                        self.producer.poll(0.01)
            remaining = self.producer.flush(30)
            t2 = time.perf_counter()
            self.stats["produce_s"] += t2 - t1
            if remaining or errors:
                self.stats["failed_batches"] += 1
                raise KafkaException(f"{remaining} records unacknowledged, errors: {errors[:3]}")
            conn.execute(MARK_SQL, ([r[0] for r in rows],))
        self.stats["mark_commit_s"] += time.perf_counter() - t2
        self.stats["published"] += len(rows)
        return len(rows)

    def run(self) -> None:
        """Relay until :meth:`stop`; Kafka or database errors roll back and retry after a pause."""
        while not self.stop_event.is_set():
            try:
                n = self.run_once()
            except (KafkaException, psycopg.OperationalError) as exc:
                print(f"polling publisher: cycle failed, rows stay unpublished: {exc}", file=sys.stderr, flush=True)
                self.stop_event.wait(1.0)
                continue
            if n < self.batch_size:
                self.stop_event.wait(self.poll_interval_s)

    def stop(self) -> None:
        self.stop_event.set()

    def close(self) -> None:
        self.producer.flush(10)
        if self.conn is not None:
            self.conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", required=True, help="the scratch database holding the polling outbox")
    parser.add_argument("--bootstrap", default=None, help="Kafka (default POSTBOX_KAFKA_BOOTSTRAP)")
    parser.add_argument("--poll-interval-ms", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--stats-file", default=None, help="write the relay's counters here (JSON) on exit")
    args = parser.parse_args()
    if args.bootstrap is None:
        from postbox.settings import Settings

        args.bootstrap = Settings.load().kafka_bootstrap
    relay = PollingPublisher(args.dsn, args.bootstrap, poll_interval_ms=args.poll_interval_ms, batch_size=args.batch_size)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: relay.stop())
    print("polling publisher ready", flush=True)
    try:
        relay.run()
    finally:
        relay.close()
        if args.stats_file:
            Path(args.stats_file).write_text(json.dumps(relay.stats))


if __name__ == "__main__":
    main()
