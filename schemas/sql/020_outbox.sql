-- The outbox table: applications insert, Debezium reads the inserts from the WAL.
-- No index beyond the primary key: every index is paid on every emit.
CREATE SCHEMA IF NOT EXISTS postbox;

CREATE TABLE IF NOT EXISTS postbox.outbox (
    id             uuid        PRIMARY KEY,          -- UUIDv7 made by the writer; the event id
    aggregate_type text        NOT NULL,             -- routes to topic outbox.event.<aggregate_type>
    aggregate_id   text        NOT NULL,             -- Kafka key: one aggregate, one partition
    event_type     text        NOT NULL,
    payload        bytea       NOT NULL,             -- Avro single-object encoding (or UTF-8 JSON)
    created_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    traceparent    text                              -- W3C trace context, when the caller had one
);

-- Inserts only: updates, deletes and truncates never reach Kafka (retention deletes stay local).
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_publication WHERE pubname = 'postbox_outbox') THEN
        CREATE PUBLICATION postbox_outbox FOR TABLE postbox.outbox WITH (publish = 'insert');
    END IF;
END
$$;
