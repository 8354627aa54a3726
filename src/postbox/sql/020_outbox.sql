-- The outbox table: applications insert, Debezium reads the inserts from the WAL.
--
-- Range-partitioned on id: ids are UUIDv7, whose leading 48 bits are the creation time in Unix
-- milliseconds, so a range of ids is a range of time. Old partitions are dropped whole by
-- `postbox db retention` (no DELETE, no dead tuples, no VACUUM), and the primary key on id stays
-- the only index: every index is paid on every emit. The DEFAULT partition catches ids outside
-- every range (a writer whose clock is far off, or retention that has not run for days) so an
-- emit never fails for want of a partition; retention deletes its old rows in batches.
--
-- The schema and publication names in braces, in every file here, are the pipeline's
-- (postbox.pipelines): `postbox db init [--pipeline NAME]` fills them in; the default pipeline's
-- are postbox and postbox_outbox.
CREATE SCHEMA IF NOT EXISTS {schema};
ALTER SCHEMA {schema} OWNER TO postbox_owner;

DO $$
DECLARE
    kind "char";
    n    bigint;
BEGIN
    SELECT c.relkind INTO kind
      FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace
     WHERE s.nspname = '{schema}' AND c.relname = 'outbox';
    IF kind = 'r' THEN
        -- An outbox from before partitioning. Every row in it is already in the WAL (Debezium
        -- reads inserts from there, never from the table), so an empty one is safe to replace.
        EXECUTE 'SELECT count(*) FROM {schema}.outbox' INTO n;
        IF n > 0 THEN
            RAISE EXCEPTION '{schema}.outbox is an unpartitioned table holding % rows', n
                USING HINT = 'once Debezium has caught up, DELETE FROM {schema}.outbox, then run postbox db init again';
        END IF;
        DROP TABLE {schema}.outbox;
    END IF;
END
$$;

CREATE TABLE IF NOT EXISTS {schema}.outbox (
    id             uuid        PRIMARY KEY,          -- UUIDv7 made by the writer; the event id
    aggregate_type text        NOT NULL,             -- routes to topic outbox.event.<aggregate_type>
    aggregate_id   text        NOT NULL,             -- Kafka key: one aggregate, one partition
    event_type     text        NOT NULL,
    payload        bytea       NOT NULL,             -- Avro single-object encoding (or UTF-8 JSON)
    created_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    traceparent    text                              -- W3C trace context, when the caller had one
) PARTITION BY RANGE (id);
ALTER TABLE {schema}.outbox OWNER TO postbox_owner;

CREATE TABLE IF NOT EXISTS {schema}.outbox_default PARTITION OF {schema}.outbox DEFAULT;
ALTER TABLE {schema}.outbox_default OWNER TO postbox_owner;

-- Inserts only: updates, deletes, truncates and dropped partitions never reach Kafka.
-- publish_via_partition_root: changes in any partition are published as changes of
-- {schema}.outbox, the one table the Debezium connector captures.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_publication WHERE pubname = '{publication}') THEN
        CREATE PUBLICATION {publication} FOR TABLE {schema}.outbox
            WITH (publish = 'insert', publish_via_partition_root = true);
    ELSE
        ALTER PUBLICATION {publication} SET (publish = 'insert', publish_via_partition_root = true);
        IF NOT EXISTS (SELECT FROM pg_publication_rel r JOIN pg_publication p ON p.oid = r.prpubid
                        WHERE p.pubname = '{publication}' AND r.prrelid = '{schema}.outbox'::regclass) THEN
            ALTER PUBLICATION {publication} ADD TABLE {schema}.outbox;
        END IF;
    END IF;
END
$$;
