-- Time partitions of the outbox, keyed on the UUIDv7 id (see 020_outbox.sql).
--
-- These functions are SECURITY INVOKER and owned by postbox_owner: only a session that has done
-- SET ROLE postbox_owner (postbox db init, postbox db retention as postbox_maint) can use them,
-- because only a table's owner may attach partitions to it.

-- The smallest uuid whose UUIDv7 timestamp is ts: every id made at or after ts sorts >= it.
CREATE OR REPLACE FUNCTION {schema}.uuid7_bound(ts timestamptz) RETURNS uuid
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
    SELECT (lpad(to_hex(floor(extract(epoch FROM ts) * 1000)::bigint), 12, '0')
            || '00000000000000000000')::uuid
$$;

-- The creation time stored in a UUIDv7 (for reading partition bounds).
CREATE OR REPLACE FUNCTION {schema}.uuid7_time(id uuid) RETURNS timestamptz
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
    SELECT to_timestamp(('x' || substr(replace(id::text, '-', ''), 1, 12))::bit(48)::bigint / 1000.0)
$$;

-- Every partition of the outbox with its id range and the time range that covers.
CREATE OR REPLACE VIEW {schema}.outbox_partitions AS
SELECT c.relname::text                                            AS partition,
       b.lower_id,
       b.upper_id,
       {schema}.uuid7_time(b.lower_id)                             AS lower_time,
       {schema}.uuid7_time(b.upper_id)                             AS upper_time,
       pg_get_expr(c.relpartbound, c.oid) = 'DEFAULT'             AS is_default,
       i.inhdetachpending                                         AS detach_pending
  FROM pg_inherits i
  JOIN pg_class c ON c.oid = i.inhrelid
  CROSS JOIN LATERAL (
        SELECT substring(pg_get_expr(c.relpartbound, c.oid) FROM $r$FROM \('([0-9a-f-]{36})'\)$r$)::uuid AS lower_id,
               substring(pg_get_expr(c.relpartbound, c.oid) FROM $r$TO \('([0-9a-f-]{36})'\)$r$)::uuid   AS upper_id
       ) b
 WHERE i.inhparent = '{schema}.outbox'::regclass;

-- Create the partitions covering [now rounded down to width, now + ahead), skipping any range an
-- existing partition already overlaps (so runs with different widths coexist) and any range the
-- default partition holds rows in (attaching it would fail; those rows age out of the default).
-- Partitions are made standalone and then ATTACHed: ATTACH takes only SHARE UPDATE EXCLUSIVE on
-- {schema}.outbox, so concurrent emits are never blocked (CREATE TABLE ... PARTITION OF would
-- take ACCESS EXCLUSIVE).
CREATE OR REPLACE FUNCTION {schema}.outbox_ensure_partitions(
    width interval, ahead interval, at timestamptz DEFAULT clock_timestamp()
) RETURNS SETOF text
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    lo    timestamptz := date_bin(width, at, timestamptz '2000-01-01 00:00:00+00');
    hi    timestamptz;
    lo_id uuid;
    hi_id uuid;
    name  text;
BEGIN
    IF width < interval '1 minute' THEN
        RAISE EXCEPTION 'partition width % is below one minute', width;
    END IF;
    WHILE lo < at + ahead LOOP
        hi := lo + width;
        lo_id := {schema}.uuid7_bound(lo);
        hi_id := {schema}.uuid7_bound(hi);
        name := 'outbox_p' || to_char(lo AT TIME ZONE 'UTC', 'YYYYMMDD"t"HH24MISS');
        IF NOT EXISTS (SELECT FROM {schema}.outbox_partitions p
                        WHERE NOT p.is_default AND p.lower_id < hi_id AND p.upper_id > lo_id) THEN
            BEGIN
                -- LIKE copies the column types, so a new partition carries the deliverability rules (domain
                -- types, 050_deliverable.sql) as ATTACH requires; INCLUDING CONSTRAINTS copies any table CHECK.
                EXECUTE format('CREATE TABLE {schema}.%I (LIKE {schema}.outbox INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', name);
                EXECUTE format('ALTER TABLE {schema}.outbox ATTACH PARTITION {schema}.%I FOR VALUES FROM (%L) TO (%L)',
                               name, lo_id, hi_id);
                RETURN NEXT format('created partition {schema}.%s for %s .. %s', name, lo, hi);
            EXCEPTION WHEN check_violation THEN
                RETURN NEXT format('skipped partition {schema}.%s: the default partition holds rows in %s .. %s',
                                   name, lo, hi);
            END;
        END IF;
        lo := hi;
    END LOOP;
END
$$;

-- Delete up to batch rows older than older_than from the default partition; returns how many.
-- By created_at, not id: the default partition is where ids that fit no range land, including
-- ids that are not UUIDv7 at all. Only rows written by transactions older than horizon (the
-- oldest_xid of a checkpoint the replication slot has confirmed, 035_retention_checkpoints.sql):
-- the others may not have reached Kafka yet.
DROP FUNCTION IF EXISTS {schema}.outbox_purge_default(timestamptz, integer);
CREATE OR REPLACE FUNCTION {schema}.outbox_purge_default(older_than timestamptz, batch integer, horizon xid8)
RETURNS bigint
    LANGUAGE sql
    SET search_path = pg_catalog, pg_temp
AS $$
    WITH doomed AS (
        SELECT ctid FROM {schema}.outbox_default
         WHERE created_at < older_than AND {schema}.xid_precedes(xmin, horizon)
         LIMIT batch
    ), gone AS (
        DELETE FROM {schema}.outbox_default d USING doomed WHERE d.ctid = doomed.ctid RETURNING 1
    )
    SELECT count(*) FROM gone
$$;

ALTER FUNCTION {schema}.uuid7_bound(timestamptz) OWNER TO postbox_owner;
ALTER FUNCTION {schema}.uuid7_time(uuid) OWNER TO postbox_owner;
ALTER VIEW {schema}.outbox_partitions OWNER TO postbox_owner;
ALTER FUNCTION {schema}.outbox_ensure_partitions(interval, interval, timestamptz) OWNER TO postbox_owner;
ALTER FUNCTION {schema}.outbox_purge_default(timestamptz, integer, xid8) OWNER TO postbox_owner;
REVOKE ALL ON FUNCTION {schema}.outbox_ensure_partitions(interval, interval, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION {schema}.outbox_purge_default(timestamptz, integer, xid8) FROM PUBLIC;
REVOKE ALL ON {schema}.outbox_partitions FROM PUBLIC;
GRANT SELECT ON {schema}.outbox_partitions TO postbox_maint;
