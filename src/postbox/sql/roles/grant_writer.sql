-- Give an existing role (a service's own login) what postbox_app has on the outbox, and nothing
-- more (010_roles.sql, 030_grants.sql, 050_deliverable.sql):
--   USAGE on schema postbox, INSERT on postbox.outbox, SELECT on its id column alone (stock
--   producers write INSERT ... RETURNING id), DELETE only while postbox_app has it (retention
--   delete-in-transaction), EXECUTE on postbox.outbox_undeliverable (postbox doctor's check).
-- Idempotent; it revokes nothing the role had before.
--
-- `postbox db grant --role ROLE` runs this file. With your own migrations, run it after
-- postbox's setup SQL (../*.sql, in name order), in one transaction, naming the role in a setting
-- (the role is quoted with format('%I'): any name is safe):
--     BEGIN;
--     SET LOCAL postbox.grant_role = 'orders_service';
--     SET LOCAL postbox.grant_schema = 'postbox_billing';   -- another pipeline's outbox (default: postbox)
--     \i grant_writer.sql            -- or your migration tool's way to run a file
--     COMMIT;
-- Run it again after changing the retention policy (postbox db init --retention ...).
DO $$
DECLARE
    target text := current_setting('postbox.grant_role', true);
    outbox_schema text := coalesce(nullif(current_setting('postbox.grant_schema', true), ''), 'postbox');
    outbox regclass;
BEGIN
    IF coalesce(target, '') = '' THEN
        RAISE EXCEPTION 'no role to grant the outbox to: the setting postbox.grant_role is empty'
            USING HINT = 'SET LOCAL postbox.grant_role = ''your_role'' in the same transaction, then run this file';
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = target) THEN
        RAISE EXCEPTION 'role % does not exist', quote_ident(target)
            USING HINT = format('create it (CREATE ROLE %I LOGIN PASSWORD ...) or name the role your service logs in as', target);
    END IF;
    outbox := to_regclass(format('%I.outbox', outbox_schema));
    IF outbox IS NULL THEN
        RAISE EXCEPTION 'there is no outbox %.outbox in database %', quote_ident(outbox_schema), current_database()
            USING HINT = 'run postbox db init (or postbox''s setup SQL) first, with the same pipeline';
    END IF;
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO %I', outbox_schema, target);
    EXECUTE format('GRANT INSERT ON %s TO %I', outbox, target);
    EXECUTE format('GRANT SELECT (id) ON %s TO %I', outbox, target);
    IF has_table_privilege('postbox_app', outbox, 'DELETE') THEN
        EXECUTE format('GRANT DELETE ON %s TO %I', outbox, target);
    END IF;
    EXECUTE format('GRANT EXECUTE ON FUNCTION %I.outbox_undeliverable(integer) TO %I', outbox_schema, target);
END
$$;
