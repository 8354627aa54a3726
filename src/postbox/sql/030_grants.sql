-- Least privilege: the app may write events, never read or rewrite them; Debezium may read them;
-- the maintenance role has nothing of its own (it acts through SET ROLE postbox_owner).
--
-- The app's DELETE depends on the retention policy `postbox db init --retention` was given
-- (passed in as the setting postbox.retention): delete-in-transaction needs DELETE; partition
-- retention does not.
--
-- SELECT on the id column alone, whatever the policy: stock producers write
-- `INSERT ... RETURNING id` (RETURNING needs SELECT on the columns it returns) and a
-- `DELETE ... WHERE id = ...` reads id. Event ids are UUIDv7 the writer made; the payloads, types
-- and aggregates of other events stay unreadable (no SELECT on any other column).
REVOKE ALL ON SCHEMA {schema} FROM PUBLIC;
GRANT USAGE ON SCHEMA {schema} TO postbox_app, postbox_cdc, postbox_maint;
REVOKE ALL ON {schema}.outbox FROM PUBLIC;
REVOKE ALL ON {schema}.outbox_default FROM PUBLIC;
GRANT INSERT ON {schema}.outbox TO postbox_app;
GRANT SELECT ON {schema}.outbox TO postbox_cdc;

DO $$
BEGIN
    IF coalesce(current_setting('postbox.retention', true), 'partitions') = 'delete' THEN
        GRANT DELETE ON {schema}.outbox TO postbox_app;
    ELSE
        REVOKE DELETE ON {schema}.outbox FROM postbox_app;
    END IF;
END
$$;
-- A table-level SELECT (granted by hand, or by an old version) would expose the payloads: revoke
-- it, which also revokes column grants, then grant exactly the id column.
REVOKE SELECT ON {schema}.outbox FROM postbox_app;
GRANT SELECT (id) ON {schema}.outbox TO postbox_app;
