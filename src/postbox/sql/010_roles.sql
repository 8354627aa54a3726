-- Roles of the outbox, created idempotently by `postbox db init` (run as a superuser, or as a
-- role with CREATEROLE that may create in the database, as managed PostgreSQL gives:
-- docs/managed-postgres.md). Passwords are never in this file: `postbox db init` sets them from
-- the environment with ALTER ROLE ... PASSWORD.
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
DECLARE
    me      pg_roles%ROWTYPE;
    version int := current_setting('server_version_num')::int;
BEGIN
    SELECT * INTO me FROM pg_roles WHERE rolname = current_user;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'postbox_owner') THEN
        CREATE ROLE postbox_owner NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'postbox_app') THEN
        CREATE ROLE postbox_app LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'postbox_cdc') THEN
        IF NOT me.rolsuper AND (version < 160000 OR NOT me.rolreplication)
           AND EXISTS (SELECT FROM pg_roles WHERE rolname = 'rds_replication'
                                              AND pg_has_role(current_user, oid, 'USAGE WITH ADMIN OPTION')) THEN
            -- Amazon RDS / Aurora: its admin may not create a REPLICATION role (before 16 only a
            -- superuser may; from 16 only a role with REPLICATION); membership of rds_replication
            -- is how a role replicates there.
            CREATE ROLE postbox_cdc LOGIN NOREPLICATION NOSUPERUSER NOCREATEDB NOCREATEROLE;
            GRANT rds_replication TO postbox_cdc;
        ELSE
            CREATE ROLE postbox_cdc LOGIN REPLICATION NOSUPERUSER NOCREATEDB NOCREATEROLE;
        END IF;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'postbox_maint') THEN
        CREATE ROLE postbox_maint LOGIN NOINHERIT NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION;
    END IF;
    IF NOT pg_has_role('postbox_maint', 'postbox_owner', 'MEMBER') THEN
        GRANT postbox_owner TO postbox_maint;
    END IF;
    -- A non-superuser admin must be a member of postbox_owner to hand objects to it and create
    -- in its schema. From PostgreSQL 16 the role that created postbox_owner holds only ADMIN
    -- OPTION on it (no INHERIT, no SET, unless createrole_self_grant says so): grant both.
    IF NOT me.rolsuper AND version >= 160000 THEN
        IF NOT pg_has_role(current_user, 'postbox_owner', 'USAGE') OR NOT pg_has_role(current_user, 'postbox_owner', 'SET') THEN
            EXECUTE format('GRANT postbox_owner TO %I WITH INHERIT TRUE, SET TRUE', current_user);
        END IF;
    ELSIF NOT me.rolsuper AND NOT pg_has_role(current_user, 'postbox_owner', 'MEMBER') THEN
        EXECUTE format('GRANT postbox_owner TO %I', current_user);
    END IF;
END
$$;
