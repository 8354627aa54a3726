-- What retention may drop without losing an event.
--
-- Debezium reads events from the WAL, so a row dropped before the replication slot has confirmed
-- its insert is fine only while the slot lives; if the slot is later lost, the table is the last
-- copy of every event the connector never published (docs/recovery.md republishes from it). A
-- row's insert LSN is not stored anywhere, so retention brackets it instead: a checkpoint records
-- the WAL insert position L and the oldest transaction still running X (taken first). Every
-- transaction older than X had committed, its commit record before L. Once the slot's
-- confirmed_flush_lsn >= L, every row whose xmin precedes X has reached Kafka.
CREATE TABLE IF NOT EXISTS {schema}.retention_checkpoints (
    taken_at   timestamptz PRIMARY KEY DEFAULT clock_timestamp(),
    lsn        pg_lsn      NOT NULL,   -- pg_current_wal_insert_lsn() when taken
    oldest_xid xid8        NOT NULL    -- pg_snapshot_xmin(pg_current_snapshot()) when taken
);
ALTER TABLE {schema}.retention_checkpoints OWNER TO postbox_owner;
REVOKE ALL ON {schema}.retention_checkpoints FROM PUBLIC;

-- Which replication slot must confirm a checkpoint: the stats_reset of the slot's statistics when
-- the checkpoint was taken (outbox/slot_identity.py). A slot dropped and created again under the
-- same name has a confirmed_flush_lsn past every older checkpoint without having streamed the
-- rows before its creation; its statistics start empty, so its stamp differs. NULL: taken before
-- checkpoints carried a stamp; never counted as confirmed.
ALTER TABLE {schema}.retention_checkpoints ADD COLUMN IF NOT EXISTS slot_stamp timestamptz;

-- Stamping the slot resets its statistics, which PostgreSQL lets only a superuser do unless it
-- grants the function. Where the admin running init may not grant it (managed PostgreSQL),
-- retention refuses to drop rows and names this statement for someone who may.
DO $$
BEGIN
    IF has_function_privilege('pg_catalog.pg_stat_reset_replication_slot(text)', 'EXECUTE WITH GRANT OPTION') THEN
        GRANT EXECUTE ON FUNCTION pg_catalog.pg_stat_reset_replication_slot(text) TO postbox_owner;
    END IF;
END
$$;

-- Whether the transaction that wrote a row (its xmin) is older than a checkpoint's oldest_xid.
-- Compared through age(), which is wraparound-safe for any xid of the last 2^31 transactions;
-- frozen rows (very old) have the largest age and count as older.
CREATE OR REPLACE FUNCTION {schema}.xid_precedes(row_xmin xid, horizon xid8) RETURNS boolean
    LANGUAGE sql STABLE STRICT PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
    SELECT age(row_xmin) > age(((horizon::text::numeric % 4294967296)::text)::xid)
$$;
ALTER FUNCTION {schema}.xid_precedes(xid, xid8) OWNER TO postbox_owner;

-- Set by retention when it finds the slot lost, missing or replaced (its stamp changed); while one
-- exists retention drops nothing, even once a new slot exists (a new slot "confirms" every older
-- checkpoint, though the rows before it were never published through it). `postbox db republish`
-- releases it.
CREATE TABLE IF NOT EXISTS {schema}.retention_holds (
    since  timestamptz PRIMARY KEY DEFAULT clock_timestamp(),
    reason text        NOT NULL
);
-- What releases a hold: 'republish' (a missing, lost or replaced slot: only `postbox db republish`)
-- or 'trust' (the slot's stamp went with the server's statistics in a crash: a republish, or the
-- operator vouching for the slot with `postbox db retention --trust-slot`).
ALTER TABLE {schema}.retention_holds ADD COLUMN IF NOT EXISTS kind text NOT NULL DEFAULT 'republish';
ALTER TABLE {schema}.retention_holds OWNER TO postbox_owner;
REVOKE ALL ON {schema}.retention_holds FROM PUBLIC;
