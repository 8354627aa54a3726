-- Rows the connector can deliver (#12.7). The Debezium task publishes rows in WAL order and cannot
-- skip one: a row whose aggregate_type is not a legal Kafka topic name, or whose key is too large
-- for a produce request, fails the task on every restart and stops every event behind it. The
-- writer refuses such rows (postbox.outbox.deliverable, the same numbers); this constraint refuses
-- them from every other writer.
--
--   aggregate_type  [A-Za-z0-9._-], at most 232 characters: outbox.event.<type>.dlq <= 249
--   aggregate_id    1 to 4096 UTF-8 bytes (the Kafka key; payload + key + headers <= 1 MiB)
--   event_type      1 to 255 characters (a header)
--   traceparent     at most 512 bytes (a header)
--
-- Idempotent, also on existing databases: the constraint is added NOT VALID (new rows are checked
-- at once, existing rows are not scanned under a lock), then validated; if an existing row breaks
-- it, it stays NOT VALID with a WARNING and `postbox doctor` names the rows.

-- Why a row cannot be delivered, or NULL when it can.
CREATE OR REPLACE FUNCTION postbox.outbox_row_problem(
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
ALTER FUNCTION postbox.outbox_row_problem(text, text, text, text) OWNER TO postbox_owner;

-- The CHECK spells the same rules out inline instead of calling the function above (#17): a
-- CHECK is prepared for every INSERT statement, and a SQL function in it is parsed again each
-- time (inlined or run by the SQL-function executor), which cost more than the rest of the insert
-- (measured: docs/writer.md). An inline expression is stored parsed. A test keeps the two equal.
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_constraint
                WHERE conname = 'outbox_deliverable' AND conrelid = 'postbox.outbox'::regclass
                  AND pg_get_constraintdef(oid) LIKE '%outbox_row_problem%') THEN
        ALTER TABLE postbox.outbox DROP CONSTRAINT outbox_deliverable;  -- the slow form, before #17
    END IF;
    IF NOT EXISTS (SELECT FROM pg_constraint
                    WHERE conname = 'outbox_deliverable' AND conrelid = 'postbox.outbox'::regclass) THEN
        ALTER TABLE postbox.outbox ADD CONSTRAINT outbox_deliverable CHECK (
                aggregate_type ~ '^[A-Za-z0-9._-]+$' AND length(aggregate_type) <= 232
            AND octet_length(aggregate_id) BETWEEN 1 AND 4096
            AND length(event_type) BETWEEN 1 AND 255
            AND (traceparent IS NULL OR octet_length(traceparent) <= 512)
        ) NOT VALID;
    END IF;
    IF EXISTS (SELECT FROM pg_constraint
                WHERE conname = 'outbox_deliverable' AND conrelid = 'postbox.outbox'::regclass AND NOT convalidated) THEN
        BEGIN
            ALTER TABLE postbox.outbox VALIDATE CONSTRAINT outbox_deliverable;
        EXCEPTION WHEN check_violation THEN
            RAISE WARNING 'postbox.outbox holds rows the connector cannot deliver; constraint outbox_deliverable stays NOT VALID'
                USING HINT = 'postbox doctor names them; see docs/recovery.md';
        END;
    END IF;
END
$$;

-- The rows that break the rules (for `postbox doctor`, which connects as the app role and may not
-- read the outbox): ids and reasons only, never payloads. Only needed while the constraint is NOT
-- VALID; a validated constraint proves there are none.
CREATE OR REPLACE FUNCTION postbox.outbox_undeliverable(max_rows integer DEFAULT 20)
RETURNS TABLE (id uuid, aggregate_type text, problem text)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
    SELECT o.id, left(o.aggregate_type, 80), p.problem
      FROM postbox.outbox o
     CROSS JOIN LATERAL (SELECT postbox.outbox_row_problem(o.aggregate_type, o.aggregate_id, o.event_type, o.traceparent)
                         AS problem) p
     WHERE p.problem IS NOT NULL
     ORDER BY o.id
     LIMIT max_rows
$$;
ALTER FUNCTION postbox.outbox_undeliverable(integer) OWNER TO postbox_owner;
REVOKE ALL ON FUNCTION postbox.outbox_undeliverable(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION postbox.outbox_undeliverable(integer) TO postbox_app, postbox_maint;
