-- Least privilege: the app may write events, never read or rewrite them; Debezium may read them;
-- the maintenance role has nothing of its own (it acts through SET ROLE postbox_owner).
--
-- The app's DELETE depends on the retention policy `postbox db init --retention` was given
-- (passed in as the setting postbox.retention): delete-in-transaction needs DELETE plus SELECT on
-- the id column (a DELETE ... WHERE id = ... reads id); partition retention needs neither.
REVOKE ALL ON SCHEMA postbox FROM PUBLIC;
GRANT USAGE ON SCHEMA postbox TO postbox_app, postbox_cdc, postbox_maint;
REVOKE ALL ON postbox.outbox FROM PUBLIC;
REVOKE ALL ON postbox.outbox_default FROM PUBLIC;
GRANT INSERT ON postbox.outbox TO postbox_app;
GRANT SELECT ON postbox.outbox TO postbox_cdc;

DO $$
BEGIN
    IF coalesce(current_setting('postbox.retention', true), 'partitions') = 'delete' THEN
        GRANT DELETE ON postbox.outbox TO postbox_app;
        GRANT SELECT (id) ON postbox.outbox TO postbox_app;
    ELSE
        REVOKE DELETE ON postbox.outbox FROM postbox_app;
        REVOKE SELECT (id) ON postbox.outbox FROM postbox_app;
        REVOKE SELECT ON postbox.outbox FROM postbox_app;
    END IF;
END
$$;
