-- The oldest row retention has left in the outbox: the smallest id (UUIDv7: the oldest creation
-- time), read as the first entry of the primary key's index of each partition, ordered.
SELECT id::text, created_at FROM {schema}.outbox ORDER BY id LIMIT 1
