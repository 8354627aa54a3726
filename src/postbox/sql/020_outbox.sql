-- The outbox table: applications insert, Debezium reads the inserts from the WAL.
--
-- Range-partitioned on id: ids are UUIDv7, whose leading 48 bits are the creation time in Unix
-- milliseconds, so a range of ids is a range of time. Old partitions are dropped whole by
-- `postbox db retention` (no DELETE, no dead tuples, no VACUUM), and the primary key on id stays
-- the only index: every index is paid on every emit. The DEFAULT partition catches ids outside
-- every range (a writer whose clock is far off, or retention that has not run for days) so an
-- emit never fails for want of a partition; retention deletes its old rows in batches.
CREATE SCHEMA IF NOT EXISTS postbox;
ALTER SCHEMA postbox OWNER TO postbox_owner;

DO $$
DECLARE
    kind "char";
    n    bigint;
BEGIN
    SELECT c.relkind INTO kind
      FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace
     WHERE s.nspname = 'postbox' AND c.relname = 'outbox';
    IF kind = 'r' THEN
        -- An outbox from before partitioning. Every row in it is already in the WAL (Debezium
        -- reads inserts from there, never from the table), so an empty one is safe to replace.
        EXECUTE 'SELECT count(*) FROM postbox.outbox' INTO n;
        IF n > 0 THEN
            RAISE EXCEPTION 'postbox.outbox is an unpartitioned table holding % rows', n
                USING HINT = 'once Debezium has caught up, DELETE FROM postbox.outbox, then run postbox db init again';
        END IF;
        DROP TABLE postbox.outbox;
    END IF;
END
$$;

CREATE TABLE IF NOT EXISTS postbox.outbox (
    id             uuid        PRIMARY KEY,          -- UUIDv7 made by the writer; the event id
    aggregate_type text        NOT NULL,             -- routes to topic outbox.event.<aggregate_type>
    aggregate_id   text        NOT NULL,             -- Kafka key: one aggregate, one partition
    event_type     text        NOT NULL,
    payload        bytea       NOT NULL,             -- Avro single-object encoding (or UTF-8 JSON)
    created_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    traceparent    text                              -- W3C trace context, when the caller had one
) PARTITION BY RANGE (id);
ALTER TABLE postbox.outbox OWNER TO postbox_owner;

CREATE TABLE IF NOT EXISTS postbox.outbox_default PARTITION OF postbox.outbox DEFAULT;
ALTER TABLE postbox.outbox_default OWNER TO postbox_owner;

-- Inserts only: updates, deletes, truncates and dropped partitions never reach Kafka.
-- publish_via_partition_root: changes in any partition are published as changes of
-- postbox.outbox, the one table the Debezium connector captures.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_publication WHERE pubname = 'postbox_outbox') THEN
        CREATE PUBLICATION postbox_outbox FOR TABLE postbox.outbox
            WITH (publish = 'insert', publish_via_partition_root = true);
    ELSE
        ALTER PUBLICATION postbox_outbox SET (publish = 'insert', publish_via_partition_root = true);
        IF NOT EXISTS (SELECT FROM pg_publication_rel r JOIN pg_publication p ON p.oid = r.prpubid
                        WHERE p.pubname = 'postbox_outbox' AND r.prrelid = 'postbox.outbox'::regclass) THEN
            ALTER PUBLICATION postbox_outbox ADD TABLE postbox.outbox;
        END IF;
    END IF;
END
$$;
