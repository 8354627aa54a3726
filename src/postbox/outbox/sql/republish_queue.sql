-- The rows to republish, numbered in the order the database took them: created_at is the
-- database's clock_timestamp() at the insert, one clock for every writer, where the UUIDv7 id
-- is each writer's own clock (two hosts 250 ms apart would reverse an aggregate's events).
-- One sort for the whole run; each batch then reads its slice by number through the temp table.
CREATE TEMP TABLE republish_queue ON COMMIT PRESERVE ROWS AS
SELECT row_number() OVER (ORDER BY created_at, id) AS n, id
  FROM {schema}.outbox
 WHERE (%(since)s::timestamptz IS NULL OR created_at >= %(since)s::timestamptz)
   AND {schema}.outbox_row_problem(aggregate_type, aggregate_id, event_type, traceparent) IS NULL
