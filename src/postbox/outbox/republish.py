"""Republish outbox rows still in the table: the recovery after a lost replication slot.

Why this way: each row is deleted and inserted again, unchanged, in one statement. The publication
carries inserts only (and the connector skips deletes), so Debezium sees a fresh insert of the same
row and the Outbox Event Router publishes it exactly as the first time: same event id, key,
headers and payload, through the same topic routing. No second publishing path to keep in step
with the router, and consumers absorb the copies that had reached Kafka before (dedupe by id).

Rows go in the order the database took them (``created_at``, its own clock at the insert; ids
are UUIDv7 from each writer's clock, which hosts do not share), in batches of ``batch`` rows, one
transaction each, so per-aggregate order holds among republished events; a republished event can
still arrive after a later event of its aggregate that was published before the loss. Rows the
connector could not deliver (``outbox_row_problem``) are left alone and counted. A successful run releases retention's
hold (``<schema>.retention_holds``), and the re-inserted rows carry new transaction ids, so
retention keeps them until the new slot has confirmed them. Before re-inserting, it forgets
retention's checkpoints (a slot that may no longer stream confirmed them) and stamps the slot
there now with a fresh one, so a slot replaced after the republish is recognised too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any


from postbox.errors import RetentionError
from postbox.outbox.retention import owner_connection
from postbox.outbox.slot_identity import reanchor
from postbox.outbox.sql_text import sql_text
from postbox.pipelines import Pipeline

QUEUE_SQL = sql_text("republish_queue.sql")
BATCH_SQL = sql_text("republish_batch.sql")


@dataclass
class RepublishReport:
    republished: int = 0
    skipped_undeliverable: int = 0
    released_holds: int = 0
    first_id: str | None = None
    last_id: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def republish(
    conninfo: str,
    *,
    since: datetime | None = None,
    batch: int = 1000,
    progress: Callable[[int], None] | None = None,
    pipeline: Pipeline | str | None = None,
    slot_name: str | None = None,
) -> RepublishReport:
    """Re-insert every row of ``pipeline``'s outbox (created at or after ``since``) so its connector
    publishes it again. ``pipeline``: default ``POSTBOX_PIPELINE``, else the default pipeline;
    ``slot_name``: the replication slot retention checks (default the pipeline's), stamped afresh."""
    if batch < 1:
        raise RetentionError(f"batch {batch} must be positive", fix="e.g. --batch 1000")
    chosen = Pipeline.parse(pipeline)
    report = RepublishReport()
    with owner_connection(conninfo, "to republish", chosen) as conn:
        reanchor(conn, chosen, slot_name)
        with conn.transaction():
            conn.execute("DROP TABLE IF EXISTS pg_temp.republish_queue")
            conn.execute(chosen.sql(QUEUE_SQL), {"since": since})
        total = conn.execute("SELECT count(*) FROM republish_queue").fetchone()[0]  # type: ignore[index]
        for after in range(0, total, batch):
            with conn.transaction():
                ids = [r[0] for r in conn.execute(chosen.sql(BATCH_SQL), {"after": after, "batch": batch})]
            if not ids:
                continue  # deleted meanwhile (retention holds while a slot is lost, so rarely)
            report.first_id = report.first_id or str(ids[0])
            report.last_id = str(ids[-1])
            report.republished += len(ids)
            if progress is not None:
                progress(report.republished)
        conn.execute("DROP TABLE republish_queue")
        report.skipped_undeliverable = conn.execute(
            chosen.sql("SELECT count(*) FROM {schema}.outbox_undeliverable(2147483647)")
        ).fetchone()[0]  # type: ignore[index]
        report.released_holds = conn.execute(chosen.sql("DELETE FROM {schema}.retention_holds")).rowcount
    return report


__all__ = ["RepublishReport", "republish"]
