-- Rows the connector can deliver. The Debezium task publishes rows in WAL order and cannot
-- skip one: a row whose aggregate_type is not a legal Kafka topic name, or whose key is too large
-- for a produce request, fails the task on every restart and stops every event behind it. The
-- writer refuses such rows (postbox.outbox.deliverable, the same numbers); the column types below
-- refuse them from every other writer.
--
--   aggregate_type  [A-Za-z0-9._-], at most 232 characters: outbox.event.<type>.dlq <= 249
--   aggregate_id    1 to 4096 UTF-8 bytes (the Kafka key; payload + key + headers <= 1 MiB)
--   event_type      1 to 255 characters (a header)
--   traceparent     at most 512 bytes (a header)

-- Why a row cannot be delivered, or NULL when it can.
CREATE OR REPLACE FUNCTION {schema}.outbox_row_problem(
    aggregate_type text, aggregate_id text, event_type text, traceparent text
) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE
        WHEN aggregate_type !~ '^[A-Za-z0-9._-]+$'
            THEN 'aggregate_type is not a legal Kafka topic name (only A-Z a-z 0-9 . _ -)'
        WHEN length(aggregate_type) > 232
            THEN format('aggregate_type is %s characters (at most 232)', length(aggregate_type))
        WHEN octet_length(aggregate_id) NOT BETWEEN 1 AND 4096
            THEN format('aggregate_id (the Kafka key) is %s bytes (1 to 4096)', octet_length(aggregate_id))
        WHEN length(event_type) NOT BETWEEN 1 AND 255
            THEN format('event_type is %s characters (1 to 255)', length(event_type))
        WHEN octet_length(traceparent) > 512
            THEN format('traceparent is %s bytes (at most 512)', octet_length(traceparent))
    END
$$;
ALTER FUNCTION {schema}.outbox_row_problem(text, text, text, text) OWNER TO postbox_owner;

-- The same rules as domain types of the four columns, not as a table CHECK: PostgreSQL
-- rebuilds a table CHECK's expression from its stored text at the start of every INSERT
-- statement (measured ~30 µs of server CPU per emit, a third of what its INSERT cost), while a
-- domain's constraints are prepared once per session and cached. They refuse the same rows from
-- every writer, and the error names the column: value for domain {schema}.aggregate_type violates
-- check constraint "aggregate_type_deliverable". A test keeps them equal to the function above.
--
-- Idempotent, also on a database of an earlier version (text columns, CHECK outbox_deliverable):
-- 1. each domain is made without its constraint, so changing a column to it rewrites nothing
--    (a brief ACCESS EXCLUSIVE lock on the outbox, as adding the CHECK took);
-- 2. the old CHECK is dropped first (a type change would rebuild and re-check it);
-- 3. the constraints are added NOT VALID (new rows are refused from now on), then validated: that
--    scans the outbox once under a SHARE lock (emits wait for the scan; retention keeps the table
--    small). If an existing row breaks a rule, that constraint stays NOT VALID with a WARNING and
--    `postbox doctor` names the rows.
DO $$
DECLARE
    col   text;
    rule  text;
    views text;
BEGIN
    FOREACH col IN ARRAY ARRAY['aggregate_type', 'aggregate_id', 'event_type', 'traceparent'] LOOP
        IF to_regtype('{schema}.' || col) IS NULL THEN
            EXECUTE format('CREATE DOMAIN {schema}.%I AS text', col);
            EXECUTE format('ALTER DOMAIN {schema}.%I OWNER TO postbox_owner', col);
        END IF;
    END LOOP;
    -- PostgreSQL cannot change the type of a column a view uses (a team's dashboard view on the
    -- outbox): name those views and the way out, before anything is changed.
    SELECT string_agg(DISTINCT v.oid::regclass::text, ', ') INTO views
      FROM pg_depend d
      JOIN pg_rewrite r ON r.oid = d.objid
      JOIN pg_class v ON v.oid = r.ev_class
      JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
     WHERE d.classid = 'pg_rewrite'::regclass AND d.refobjid = '{schema}.outbox'::regclass
       AND a.attname IN ('aggregate_type', 'aggregate_id', 'event_type', 'traceparent')
       AND a.atttypid <> ('{schema}.' || a.attname)::regtype;
    IF views IS NOT NULL THEN
        RAISE EXCEPTION 'the outbox''s columns become domain types over text ({schema}.<column>), and PostgreSQL cannot change the type of a column a view uses: %', views
            USING HINT = format('drop %s, run postbox db init again, then recreate it (its columns read as text as before)', views);
    END IF;
    IF EXISTS (SELECT FROM pg_constraint WHERE conname = 'outbox_deliverable' AND conrelid = '{schema}.outbox'::regclass) THEN
        ALTER TABLE {schema}.outbox DROP CONSTRAINT outbox_deliverable;  -- the table CHECK the domains replaced
    END IF;
    FOREACH col IN ARRAY ARRAY['aggregate_type', 'aggregate_id', 'event_type', 'traceparent'] LOOP
        IF (SELECT atttypid FROM pg_attribute WHERE attrelid = '{schema}.outbox'::regclass AND attname = col)
           <> ('{schema}.' || col)::regtype THEN
            EXECUTE format('ALTER TABLE {schema}.outbox ALTER COLUMN %I TYPE {schema}.%I', col, col);
        END IF;
    END LOOP;
    FOR col, rule IN VALUES
        ('aggregate_type', $r$VALUE ~ '^[A-Za-z0-9._-]+$' AND length(VALUE) <= 232$r$),
        ('aggregate_id',   $r$octet_length(VALUE) BETWEEN 1 AND 4096$r$),
        ('event_type',     $r$length(VALUE) BETWEEN 1 AND 255$r$),
        ('traceparent',    $r$octet_length(VALUE) <= 512$r$)
    LOOP
        IF NOT EXISTS (SELECT FROM pg_constraint WHERE contypid = ('{schema}.' || col)::regtype
                                                    AND conname = col || '_deliverable') THEN
            EXECUTE format('ALTER DOMAIN {schema}.%I ADD CONSTRAINT %I CHECK (%s) NOT VALID', col, col || '_deliverable', rule);
        END IF;
        IF EXISTS (SELECT FROM pg_constraint WHERE contypid = ('{schema}.' || col)::regtype
                                                AND conname = col || '_deliverable' AND NOT convalidated) THEN
            BEGIN
                EXECUTE format('ALTER DOMAIN {schema}.%I VALIDATE CONSTRAINT %I', col, col || '_deliverable');
            EXCEPTION WHEN check_violation THEN
                RAISE WARNING '{schema}.outbox holds rows the connector cannot deliver; constraint %_deliverable stays NOT VALID', col
                    USING HINT = 'postbox doctor names them; see docs/recovery.md';
            END;
        END IF;
    END LOOP;
END
$$;

-- The rows that break the rules (for `postbox doctor`, which connects as the app role and may not
-- read the outbox): ids and reasons only, never payloads. Only needed while the constraint is NOT
-- VALID; a validated constraint proves there are none.
CREATE OR REPLACE FUNCTION {schema}.outbox_undeliverable(max_rows integer DEFAULT 20)
RETURNS TABLE (id uuid, aggregate_type text, problem text)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
    SELECT o.id, left(o.aggregate_type, 80), p.problem
      FROM {schema}.outbox o
     CROSS JOIN LATERAL (SELECT {schema}.outbox_row_problem(o.aggregate_type, o.aggregate_id, o.event_type, o.traceparent)
                         AS problem) p
     WHERE p.problem IS NOT NULL
     ORDER BY o.id
     LIMIT max_rows
$$;
ALTER FUNCTION {schema}.outbox_undeliverable(integer) OWNER TO postbox_owner;
REVOKE ALL ON FUNCTION {schema}.outbox_undeliverable(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION {schema}.outbox_undeliverable(integer) TO postbox_app, postbox_maint;
