-- A batch of outbox rows in one statement and one round trip: six binary arrays (%b), one element
-- per event, unnested in the order given. Each row is still its own heap insert with its own WAL
-- record and LSN (an INSERT ... SELECT never uses the multi-insert path COPY takes), which is what
-- Debezium needs to resume inside a transaction after a restart (dbz#1554 lost events that share
-- one LSN, as COPY's rows do); tests/integration/test_writer_batch_wal.py checks it on the WAL.
INSERT INTO {schema}.outbox (id, aggregate_type, aggregate_id, event_type, payload, traceparent)
SELECT e.id, e.aggregate_type, e.aggregate_id, e.event_type, e.payload, e.traceparent
  FROM unnest(%b::uuid[], %b::text[], %b::text[], %b::text[], %b::bytea[], %b::text[])
       WITH ORDINALITY AS e(id, aggregate_type, aggregate_id, event_type, payload, traceparent, n)
 ORDER BY e.n
