-- Delete-in-transaction retention: the insert above is already in the WAL, which is all Debezium
-- reads; the row itself is never needed. The publication publishes inserts only, so this delete
-- never reaches Kafka.
DELETE FROM {schema}.outbox WHERE id = %b
