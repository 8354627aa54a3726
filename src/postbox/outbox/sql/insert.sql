-- One outbox row per statement, always: Debezium must see one insert per event (dbz#1554), so
-- batches are many of these in one pipeline, never a multi-row VALUES list or COPY.
-- %b: the id and the payload travel in binary (16 bytes, and the Avro bytes as they are), not as
-- text the server must parse (a uuid string, a hex-escaped bytea twice the payload's size).
INSERT INTO {schema}.outbox (id, aggregate_type, aggregate_id, event_type, payload, traceparent)
VALUES (%b, %s, %s, %s, %b, %s)
