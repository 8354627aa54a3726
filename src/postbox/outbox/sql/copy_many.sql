-- A batch of outbox rows as one COPY of binary rows, the cheapest way PostgreSQL takes rows.
-- The columns are in the order the writer puts each row's bytes: first what events of one kind
-- share (aggregate_type, event_type, traceparent), then the id, the key and the payload.
-- Each row must still be its own heap insert with its own WAL record and LSN, what Debezium
-- before 3.7 needed to resume inside a transaction (it lost events sharing one LSN). COPY
-- batches rows into one multi-insert WAL record unless a volatile expression forbids it; the
-- outbox's created_at default (clock_timestamp()) already does, and this WHERE, always true,
-- does so whatever the table's defaults become (PostgreSQL's copyfrom.c: a volatile WHERE clause
-- means one insert per row). tests/integration/test_writer_batch_wal.py checks it on the WAL.
COPY {schema}.outbox (aggregate_type, event_type, traceparent, id, aggregate_id, payload)
FROM STDIN (FORMAT BINARY)
WHERE clock_timestamp() IS NOT NULL
