-- A batch of outbox rows in one statement and one round trip: six binary arrays (%b), one element
-- per event, unnested in the order given; what emit_many sends where it cannot COPY (copy_many.sql).
-- Each row is still its own heap insert with its own WAL record and LSN (an INSERT ... SELECT never
-- uses COPY's multi-insert path), which is what Debezium before 3.7 needs to resume inside a
-- transaction after a restart (it lost events that share one LSN);
-- tests/integration/test_writer_batch_wal.py checks it on the WAL.
INSERT INTO {schema}.outbox (id, aggregate_type, aggregate_id, event_type, payload, traceparent)
SELECT e.id, e.aggregate_type, e.aggregate_id, e.event_type, e.payload, e.traceparent
  FROM unnest(%b::uuid[], %b::text[], %b::text[], %b::text[], %b::bytea[], %b::text[])
       WITH ORDINALITY AS e(id, aggregate_type, aggregate_id, event_type, payload, traceparent, n)
 ORDER BY e.n
