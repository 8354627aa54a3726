-- One outbox row per statement, always: Debezium must see one insert per event (dbz#1554), so
-- batches are many of these in one pipeline, never a multi-row VALUES list or COPY.
INSERT INTO postbox.outbox (id, aggregate_type, aggregate_id, event_type, payload, traceparent)
VALUES (%s, %s, %s, %s, %s, %s)
