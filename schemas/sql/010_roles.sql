-- Roles of the outbox, created idempotently by `postbox db init` (run as a database owner or
-- superuser). Passwords are never in this file: `postbox db init` sets them from the environment
-- (or the local stack's secrets file) with ALTER ROLE ... PASSWORD.
--
--   postbox_app  the application: may insert (and delete, for delete-in-transaction retention)
--                outbox rows and nothing more in schema postbox.
--   postbox_cdc  Debezium: REPLICATION for the slot, SELECT on the outbox for its column metadata.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'postbox_app') THEN
        CREATE ROLE postbox_app LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'postbox_cdc') THEN
        CREATE ROLE postbox_cdc LOGIN REPLICATION NOSUPERUSER NOCREATEDB NOCREATEROLE;
    END IF;
END
$$;
