-- Least privilege: the app may write events, never read or rewrite them; Debezium may read them.
REVOKE ALL ON SCHEMA postbox FROM PUBLIC;
GRANT USAGE ON SCHEMA postbox TO postbox_app, postbox_cdc;
REVOKE ALL ON postbox.outbox FROM PUBLIC;
GRANT INSERT, DELETE ON postbox.outbox TO postbox_app;
GRANT SELECT ON postbox.outbox TO postbox_cdc;
