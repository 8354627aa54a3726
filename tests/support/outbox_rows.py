"""Raw outbox inserts, the way any application (or a stock Debezium outbox setup) writes them.

The foundation tests use plain SQL on purpose: they check the table, the connector and the
router, independently of postbox's own writer.
"""

from __future__ import annotations

import uuid

INSERT = (
    "INSERT INTO postbox.outbox (id, aggregate_type, aggregate_id, event_type, payload) "
    "VALUES (%s, %s, %s, %s, %s)"
)


def insert_event(conn, aggregate_type: str, aggregate_id: str, event_type: str, payload: bytes) -> str:
    event_id = str(uuid.uuid4())
    conn.execute(INSERT, (event_id, aggregate_type, aggregate_id, event_type, payload))
    return event_id
