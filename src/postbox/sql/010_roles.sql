-- Roles of the outbox, created idempotently by `postbox db init` (run as a superuser, or as a
-- database owner with CREATEROLE). Passwords are never in this file: `postbox db init` sets them
-- from the environment with ALTER ROLE ... PASSWORD.
--
--   postbox_owner  NOLOGIN: owns schema postbox, the outbox and its partitions. Nobody logs in
--                  as it; DDL runs under SET ROLE postbox_owner.
--   postbox_app    the application: inserts outbox rows (and deletes them again when retention is
--                  delete-in-transaction) and nothing more in schema postbox.
--   postbox_cdc    Debezium: REPLICATION for the slot, SELECT on the outbox for its column metadata.
--   postbox_maint  cron retention (`postbox db retention`): NOINHERIT member of postbox_owner, so it
--                  holds no privilege until it explicitly SETs ROLE postbox_owner, which
--                  partition maintenance needs (only a table's owner may attach or detach partitions).
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'postbox_owner') THEN
        CREATE ROLE postbox_owner NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'postbox_app') THEN
        CREATE ROLE postbox_app LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'postbox_cdc') THEN
        CREATE ROLE postbox_cdc LOGIN REPLICATION NOSUPERUSER NOCREATEDB NOCREATEROLE;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'postbox_maint') THEN
        CREATE ROLE postbox_maint LOGIN NOINHERIT NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION;
    END IF;
    IF NOT pg_has_role('postbox_maint', 'postbox_owner', 'MEMBER') THEN
        GRANT postbox_owner TO postbox_maint;
    END IF;
    -- A non-superuser admin must be a member of postbox_owner to hand objects to it.
    IF NOT (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)
       AND NOT pg_has_role(current_user, 'postbox_owner', 'MEMBER') THEN
        EXECUTE format('GRANT postbox_owner TO %I', current_user);
    END IF;
END
$$;
