-- One outbox row: one emit. Each event is its own WAL record with its own LSN, which Debezium
-- before 3.7 needs; batches keep that too (insert_many.sql, copy_many.sql).
-- %b: the id and the payload travel in binary (16 bytes, and the Avro bytes as they are), not as
-- text the server must parse (a uuid string, a hex-escaped bytea twice the payload's size).
INSERT INTO {schema}.outbox (id, aggregate_type, aggregate_id, event_type, payload, traceparent)
VALUES (%b, %s, %s, %s, %b, %s)
