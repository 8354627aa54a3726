-- What `postbox db init`'s admin role may do, read after PostgreSQL refused a step
-- (postbox.db_admin turns the facts into the grant that is missing). Roles that do not exist
-- drop out of the joins, so no role-name lookup can fail. %(roles)s: the outbox's roles; %(schema)s and %(publication)s: the pipeline's.
SELECT current_setting('server_version_num')::int                                  AS version,
       me.rolname::text                                                            AS admin,
       me.rolsuper                                                                 AS superuser,
       me.rolcreaterole                                                            AS createrole,
       me.rolreplication                                                           AS replication,
       current_database()::text                                                    AS database,
       has_database_privilege(current_database(), 'CREATE')                        AS create_in_database,
       to_regnamespace(%(schema)s) IS NOT NULL                                     AS schema_exists,
       ARRAY(SELECT r.rolname::text FROM pg_roles r WHERE r.rolname = ANY(%(roles)s))  AS existing,
       ARRAY(SELECT r.rolname::text FROM pg_roles r WHERE r.rolname = ANY(%(roles)s)
               AND pg_has_role(me.oid, r.oid, 'USAGE WITH ADMIN OPTION'))          AS admin_of,
       ARRAY(SELECT r.rolname::text FROM pg_roles r WHERE r.rolname = ANY(%(roles)s) AND r.rolreplication)
                                                                                   AS replication_roles,
       EXISTS (SELECT FROM pg_roles o WHERE o.rolname = 'postbox_owner' AND pg_has_role(me.oid, o.oid, 'USAGE'))
                                                                                   AS owner_usable,
       EXISTS (SELECT FROM pg_roles o, pg_roles m WHERE o.rolname = 'postbox_owner' AND m.rolname = 'postbox_maint'
                 AND pg_has_role(m.oid, o.oid, 'MEMBER'))                          AS maint_in_owner,
       EXISTS (SELECT FROM pg_roles x WHERE x.rolname = 'rds_replication'
                 AND pg_has_role(me.oid, x.oid, 'USAGE WITH ADMIN OPTION'))        AS rds_replication,
       (SELECT p.pubowner::regrole::text FROM pg_publication p WHERE p.pubname = %(publication)s)
                                                                                   AS publication_owner,
       (SELECT pg_has_role(me.oid, p.pubowner, 'USAGE') FROM pg_publication p WHERE p.pubname = %(publication)s)
                                                                                   AS publication_usable,
       %(publication)s::text                                                       AS publication
  FROM pg_roles me
 WHERE me.rolname = current_user;
