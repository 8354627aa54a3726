-- One batch of the queue: each row deleted and inserted again, unchanged, in the queue's order
-- (an INSERT .. SELECT inserts in the order its SELECT returns, and that is the WAL's order).
-- The bounds are cast: psycopg sends a small Python int as smallint, and after + batch overflows it.
WITH batch AS (
    SELECT n, id FROM republish_queue WHERE n > %(after)s::bigint AND n <= %(after)s::bigint + %(batch)s::bigint
), gone AS (
    DELETE FROM {schema}.outbox o USING batch WHERE o.id = batch.id
    RETURNING o.id, o.aggregate_type, o.aggregate_id, o.event_type, o.payload, o.created_at, o.traceparent
)
INSERT INTO {schema}.outbox (id, aggregate_type, aggregate_id, event_type, payload, created_at, traceparent)
SELECT gone.id, aggregate_type, aggregate_id, event_type, payload, created_at, traceparent
  FROM gone JOIN batch ON batch.id = gone.id
 ORDER BY batch.n
RETURNING id
