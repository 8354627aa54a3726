"""Existing roles given the outbox: what `postbox db grant --role ROLE` does.

A service that logs in with its own role (and applies its own migrations) gets what postbox_app
has on the outbox and nothing more, from the packaged ``postbox/sql/roles/grant_writer.sql``:
the same file people who run their own migrations apply. The SQL reads the role from a setting
and quotes it with ``format('%I')``; names composed here go through ``psycopg.sql.Identifier``.
The report compares the role's own grants before and after, and names the privileges it had
beyond a writer's, which the grant leaves alone (revoking them could break the service).
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from postbox.errors import PostboxError
from postbox.pipelines import Pipeline
from postbox.resources import SQL_DIR

GRANT_SQL = SQL_DIR / "roles" / "grant_writer.sql"
#: The setting grant_writer.sql reads the role's name from.
ROLE_SETTING = "postbox.grant_role"
#: The setting it reads the outbox's schema from (a pipeline's; default ``postbox``).
SCHEMA_SETTING = "postbox.grant_schema"

#: The role's own grants on the objects a writer uses (ACL entries naming it, not inherited ones).
_DIRECT_GRANTS = """
SELECT 'schema {schema}', a.privilege_type FROM pg_namespace n, aclexplode(n.nspacl) a
 WHERE n.nspname = '{schema}' AND a.grantee = %(oid)s
UNION ALL
SELECT '{schema}.outbox', a.privilege_type FROM pg_class c, aclexplode(c.relacl) a
 WHERE c.oid = '{schema}.outbox'::regclass AND a.grantee = %(oid)s
UNION ALL
SELECT '{schema}.outbox', a.privilege_type || '(' || t.attname || ')' FROM pg_attribute t, aclexplode(t.attacl) a
 WHERE t.attrelid = '{schema}.outbox'::regclass AND a.grantee = %(oid)s
UNION ALL
SELECT 'function ' || p.oid::regprocedure::text, a.privilege_type FROM pg_proc p, aclexplode(p.proacl) a
 WHERE p.oid = '{schema}.outbox_undeliverable(integer)'::regprocedure AND a.grantee = %(oid)s
"""

#: What the role can do on the outbox beyond a writer, however it got it (membership, PUBLIC).
_BEYOND_WRITER = """
SELECT array_remove(ARRAY[
         CASE WHEN has_column_privilege(%(oid)s, '{schema}.outbox', 'payload', 'SELECT') THEN 'SELECT' END,
         CASE WHEN has_table_privilege(%(oid)s, '{schema}.outbox', 'UPDATE') THEN 'UPDATE' END,
         CASE WHEN has_table_privilege(%(oid)s, '{schema}.outbox', 'DELETE')
                   AND NOT has_table_privilege('postbox_app', '{schema}.outbox', 'DELETE') THEN 'DELETE' END,
         CASE WHEN has_table_privilege(%(oid)s, '{schema}.outbox', 'TRUNCATE') THEN 'TRUNCATE' END,
         CASE WHEN has_table_privilege(%(oid)s, '{schema}.outbox', 'TRIGGER') THEN 'TRIGGER' END
       ], NULL),
       pg_has_role(%(oid)s, 'postbox_owner', 'USAGE')
"""


class GrantError(PostboxError):
    """`postbox db grant` could not give the role the outbox."""


def grant_writer(admin_url: str, role: str, pipeline: "str | Pipeline | None" = None) -> list[str]:
    """Give the existing ``role`` the outbox writer's privileges on ``pipeline``'s outbox (default
    ``POSTBOX_PIPELINE``, else the default pipeline's ``postbox.outbox``); one line per change.

    ``admin_url`` connects as a superuser or a member of postbox_owner (the admin that ran
    `postbox db init` is one). Raises :class:`GrantError` for a role that does not exist, a
    database without the outbox, or an admin that may not grant.
    """
    if not role:
        raise GrantError("no role to grant the outbox to", fix="pass --role with the role your service logs in as")
    try:
        conn = psycopg.connect(admin_url, connect_timeout=10)
    except psycopg.OperationalError as exc:
        raise GrantError(f"cannot connect with the admin URL: {str(exc).strip()}",
                         fix="pass --admin-url for a superuser or a member of postbox_owner") from exc
    names = Pipeline.parse(pipeline)
    with conn:
        oid, superuser = _existing_role(conn, role, names)
        before = _direct_grants(conn, oid, names)
        try:
            with conn.transaction():
                conn.execute("SELECT set_config(%s, %s, true)", (ROLE_SETTING, role))
                conn.execute("SELECT set_config(%s, %s, true)", (SCHEMA_SETTING, names.schema))
                conn.execute("SET LOCAL ROLE postbox_owner")  # the grants are the owner's, as db init's
                conn.execute(GRANT_SQL.read_text(encoding="utf-8").encode("utf-8"))
        except psycopg.Error as exc:
            raise _grant_failed(exc) from exc
        added = sorted(_direct_grants(conn, oid, names) - before)
        lines = [f"granted {privilege} on {target} to {role}" for target, privilege in added]
        lines = lines or [f"nothing to change: role {role} already has the outbox writer's grants"]
        return lines + _beyond_writer(conn, oid, role, superuser, names)


def _existing_role(conn: psycopg.Connection[Any], role: str, names: Pipeline) -> tuple[int, bool]:
    """(oid, is superuser) of the role, or GrantError with the statement that creates it; also
    refuses a database without the outbox."""
    row = conn.execute("SELECT oid, rolsuper FROM pg_roles WHERE rolname = %s", (role,)).fetchone()
    if row is None:
        create = sql.SQL("CREATE ROLE {} LOGIN PASSWORD '...'").format(sql.Identifier(role)).as_string(conn)
        raise GrantError(f"role {role!r} does not exist on this server",
                         fix=f"name the role your service logs in as, or create it first: {create}")
    if conn.execute("SELECT to_regclass(%s)", (names.table,)).fetchone() == (None,):
        dbname = conn.info.dbname
        raise GrantError(f"there is no outbox {names.table} in database {dbname!r}",
                         fix=f"run `postbox db init{names.flag}` on it first (or apply postbox's setup SQL)")
    return int(row[0]), bool(row[1])


def _direct_grants(conn: psycopg.Connection[Any], oid: int, names: Pipeline) -> set[tuple[str, str]]:
    return {(str(r[0]), str(r[1])) for r in conn.execute(names.sql(_DIRECT_GRANTS).encode(), {"oid": oid})}


def _beyond_writer(conn: psycopg.Connection[Any], oid: int, role: str, superuser: bool, names: Pipeline) -> list[str]:
    """Notes on what the role can do beyond emitting, which the grant does not take away."""
    if superuser:
        return [f"note: role {role} is a superuser, so it can do anything, with or without these grants"]
    extra, owner = conn.execute(names.sql(_BEYOND_WRITER).encode(), {"oid": oid}).fetchone() or ([], False)
    name = sql.Identifier(role).as_string(conn)
    lines = []
    if extra:
        lines.append(f"note: role {role} can also {', '.join(extra)} {names.table} (not from this grant); "
                     f"if the service does not need it: REVOKE {', '.join(extra)} ON {names.table} FROM {name}")
    if owner:
        lines.append(f"note: role {role} is a member of postbox_owner and so may change or drop the outbox; "
                     f"if the service does not need it: REVOKE postbox_owner FROM {name}")
    return lines


def _grant_failed(exc: psycopg.Error) -> GrantError:
    diag = exc.diag
    if isinstance(exc, psycopg.errors.InsufficientPrivilege):
        fix = "connect as a superuser or a member of postbox_owner (the admin that ran `postbox db init` is one)"
    else:
        fix = diag.message_hint or "correct what the message names, then run postbox db grant again"
    return GrantError(f"granting the outbox failed: {diag.message_primary or exc}", fix=fix)
