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
--     \i grant_writer.sql            -- or your migration tool's way to run a file
--     COMMIT;
-- Run it again after changing the retention policy (postbox db init --retention ...).
DO $$
DECLARE
    target text := current_setting('postbox.grant_role', true);
BEGIN
    IF coalesce(target, '') = '' THEN
        RAISE EXCEPTION 'no role to grant the outbox to: the setting postbox.grant_role is empty'
            USING HINT = 'SET LOCAL postbox.grant_role = ''your_role'' in the same transaction, then run this file';
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = target) THEN
        RAISE EXCEPTION 'role % does not exist', quote_ident(target)
            USING HINT = format('create it (CREATE ROLE %I LOGIN PASSWORD ...) or name the role your service logs in as', target);
    END IF;
    IF to_regclass('postbox.outbox') IS NULL THEN
        RAISE EXCEPTION 'there is no outbox in database %', current_database()
            USING HINT = 'run postbox db init (or postbox''s setup SQL) first';
    END IF;
    EXECUTE format('GRANT USAGE ON SCHEMA postbox TO %I', target);
    EXECUTE format('GRANT INSERT ON postbox.outbox TO %I', target);
    EXECUTE format('GRANT SELECT (id) ON postbox.outbox TO %I', target);
    IF has_table_privilege('postbox_app', 'postbox.outbox', 'DELETE') THEN
        EXECUTE format('GRANT DELETE ON postbox.outbox TO %I', target);
    END IF;
    EXECUTE format('GRANT EXECUTE ON FUNCTION postbox.outbox_undeliverable(integer) TO %I', target);
END
$$;
