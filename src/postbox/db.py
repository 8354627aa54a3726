"""Database setup: apply the packaged ``postbox/sql/*.sql`` idempotently and report what changed.

``init_database`` is what `postbox db init` and `postbox up` call. It runs every SQL file in name
order in one transaction (all or nothing), sets role passwords without ever sending them in
clear text (the SCRAM verifier is computed client-side, as psql's \\password does, so the
password cannot land in a server log), and creates the outbox's first time partitions. It
compares the database before and after, so its report says what it changed, and says nothing
changed on a second run.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from postbox.errors import ConfigError, PostboxError
from postbox.outbox.deliverable import RULES, database_rules_state
from postbox.outbox.policy import Retention
from postbox.outbox.retention import DEFAULT_AHEAD, DEFAULT_WIDTH
from postbox.pipelines import Pipeline

ROLES = ("postbox_owner", "postbox_app", "postbox_cdc", "postbox_maint")
PASSWORD_ENV = {
    "postbox_app": "POSTBOX_APP_PASSWORD",
    "postbox_cdc": "POSTBOX_CDC_PASSWORD",
    "postbox_maint": "POSTBOX_MAINT_PASSWORD",
}


class DatabaseInitError(PostboxError):
    """`postbox db init` could not apply the outbox SQL."""


def sql_files(sql_dir: Path | None = None) -> list[Path]:
    """The setup SQL, in the order it is applied (file name order); it travels in the package."""
    if sql_dir is None:
        from postbox.resources import SQL_DIR

        sql_dir = SQL_DIR
    files = sorted(Path(sql_dir).glob("*.sql"))
    if not files:
        raise ConfigError(f"no .sql files in {sql_dir}", fix="reinstall postbox-cdc (its wheel carries postbox/sql/*.sql)")
    return files


def init_database(
    admin_url: str,
    *,
    app_password: str | None,
    cdc_password: str | None,
    maint_password: str | None = None,
    retention: Retention | str | None = None,
    partition_width: timedelta = DEFAULT_WIDTH,
    partitions_ahead: timedelta = DEFAULT_AHEAD,
    sql_dir: Path | None = None,
    pipeline: Pipeline | str | None = None,
) -> list[str]:
    """Create or update the outbox roles, table, partitions, publication and grants.

    ``admin_url`` must connect as a superuser, or as a role with CREATEROLE (and REPLICATION, or
    RDS's rds_replication, to create postbox_cdc) that may create in the database: the shape
    managed PostgreSQL gives. What such a role lacks is named with its fix (postbox.db_admin).
    A password of None leaves that role's password as it is. Returns one line per change.
    ``pipeline`` names the outbox schema and publication (default ``POSTBOX_PIPELINE``, else the
    default pipeline's ``postbox``); the roles are the cluster's, shared by its pipelines.
    """
    policy = Retention.parse(retention)
    names = Pipeline.parse(pipeline)
    files = sql_files(sql_dir)
    try:
        conn = psycopg.connect(admin_url, connect_timeout=10)
    except psycopg.OperationalError as exc:
        from postbox.conninfo import no_database_hint

        hint = no_database_hint(admin_url) if "does not exist" in str(exc) else None
        raise DatabaseInitError(f"cannot connect with the admin URL: {str(exc).strip()}",
                                fix=hint or "pass --admin-url for a superuser or the database owner") from exc
    lines: list[str] = []
    passwords = {"postbox_app": app_password, "postbox_cdc": cdc_password, "postbox_maint": maint_password}
    with conn:
        before = _snapshot(conn, names)
        step = None
        try:
            with conn.transaction():
                conn.execute("SELECT set_config('postbox.retention', %s, true)", (policy.value,))
                for current in files:
                    step = f" in {current.name}"
                    conn.execute(names.sql(current.read_text(encoding="utf-8")).encode("utf-8"))
                for role, password in passwords.items():
                    step = f" setting the password of role {role}"
                    if password and not _password_matches(conn, role, password):
                        verifier = conn.pgconn.encrypt_password(password.encode(), role.encode(), b"scram-sha-256")
                        conn.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(
                            sql.Identifier(role), sql.Literal(verifier.decode())))
                        lines.append(f"set the password of role {role}")
                step = " creating partitions"
                conn.execute("SET LOCAL ROLE postbox_owner")
                created = conn.execute(
                    names.sql("SELECT {schema}.outbox_ensure_partitions(%s, %s)"), (partition_width, partitions_ahead)
                ).fetchall()
        except psycopg.Error as exc:
            raise _init_failed(conn, exc, step or "", {r: PASSWORD_ENV[r] for r, p in passwords.items() if p}, names) from exc
        after = _snapshot(conn, names)
    lines[:0] = _diff(before, after, policy, names)
    lines += [r[0] for r in created]
    return lines or ["nothing to change: the outbox is set up"]


def _init_failed(conn: psycopg.Connection[Any], exc: psycopg.Error, where: str, passwords: dict[str, str],
                 names: Pipeline) -> DatabaseInitError:
    """The error of a failed init (nothing was changed: one transaction). A refused privilege is
    explained by what the admin role lacks and the statement that adds it (postbox.db_admin)."""
    diag = exc.diag
    detail = f" ({diag.message_detail})" if diag.message_detail else ""
    message = f"applying the outbox SQL failed{where}: {diag.message_primary or exc}{detail}"
    if isinstance(exc, psycopg.errors.InsufficientPrivilege):
        from postbox.db_admin import missing_grants, read_facts

        try:
            missing = missing_grants(read_facts(conn, names.schema, names.publication), passwords)
        except psycopg.Error:
            missing = []
        if missing:
            marks = [f"{i}) " if len(missing) > 1 else "" for i in range(1, len(missing) + 1)]
            return DatabaseInitError(f"{message}. " + "; ".join(k + m.what for k, m in zip(marks, missing)),
                                     fix="; ".join(k + m.fix for k, m in zip(marks, missing))
                                     + "; then run postbox db init again (it changed nothing)")
    return DatabaseInitError(message, fix=diag.message_hint or _init_fix(exc))


def _init_fix(exc: psycopg.Error) -> str:
    """The fix of a failed init PostgreSQL gave no hint for: a role is the usual cause only when
    it was refused; otherwise the message itself names what to change (init is idempotent)."""
    if isinstance(exc, psycopg.errors.InsufficientPrivilege):
        return "connect as a superuser (or the database owner with CREATEROLE)"
    return "correct what the message names, then run postbox db init again (it changes only what is missing)"


def _password_matches(conn: psycopg.Connection[Any], role: str, password: str) -> bool:
    """Whether `role` already has this password, so a repeated init changes (and logs) nothing.

    Recomputes the SCRAM-SHA-256 keys with the stored salt and iteration count (RFC 5802);
    pg_authid is readable by superusers only, so anyone else just sets the password again.
    """
    import base64
    import hashlib
    import hmac

    try:
        with conn.transaction():
            row = conn.execute("SELECT rolpassword FROM pg_authid WHERE rolname = %s", (role,)).fetchone()
    except psycopg.Error:
        return False
    stored = row[0] if row else None
    if not stored or not stored.startswith("SCRAM-SHA-256$"):
        return False
    try:
        iterations_salt, keys = stored[len("SCRAM-SHA-256$"):].split("$", 1)
        iterations, salt = iterations_salt.split(":", 1)
        stored_key, server_key = keys.split(":", 1)
        salted = hashlib.pbkdf2_hmac("sha256", password.encode(), base64.b64decode(salt), int(iterations))
    except ValueError:
        return False
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    server = hmac.new(salted, b"Server Key", hashlib.sha256).digest()
    return hmac.compare_digest(base64.b64encode(hashlib.sha256(client_key).digest()).decode(), stored_key) and \
        hmac.compare_digest(base64.b64encode(server).decode(), server_key)


def _snapshot(conn: psycopg.Connection[Any], names: Pipeline) -> dict[str, Any]:
    roles = {r[0] for r in conn.execute("SELECT rolname FROM pg_roles WHERE rolname = ANY(%s)", (list(ROLES),))}
    kind = conn.execute(
        "SELECT c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname = 'outbox'", (names.schema,)
    ).fetchone()
    pub = conn.execute(
        "SELECT pubinsert, pubupdate, pubdelete, pubtruncate, pubviaroot FROM pg_publication WHERE pubname = %s", (names.publication,)
    ).fetchone()
    grants: set[tuple[str, str]] = set()
    if kind:
        # The roles that use the outbox (the owner's own privileges are implicit and not news).
        users = ["postbox_app", "postbox_cdc", "postbox_maint"]
        table_level = {
            (r[0], r[1])
            for r in conn.execute(
                "SELECT grantee, privilege_type FROM information_schema.role_table_grants "
                "WHERE table_schema = %s AND table_name = 'outbox' AND grantee = ANY(%s)", (names.schema, users)
            )
        }
        column_level = {
            (r[0], f"{r[1]}({r[2]})")
            for r in conn.execute(
                "SELECT grantee, privilege_type, column_name FROM information_schema.column_privileges "
                "WHERE table_schema = %s AND table_name = 'outbox' AND grantee = ANY(%s)", (names.schema, users)
            )
            if (r[0], r[1]) not in table_level  # implied by the table-level grant
        }
        grants = table_level | column_level
    stamp = "postbox_owner" in roles and conn.execute(
        "SELECT has_function_privilege('postbox_owner', 'pg_catalog.pg_stat_reset_replication_slot(text)', 'EXECUTE')"
    ).fetchone() == (True,)
    return {"roles": roles, "kind": kind[0] if kind else None, "pub": pub, "grants": grants,
            "deliverable": database_rules_state(conn, names) if kind else None, "slot_stamp": stamp}


def _diff(before: dict[str, Any], after: dict[str, Any], policy: Retention, names: Pipeline) -> list[str]:
    lines = [f"created role {r}" for r in ROLES if r in after["roles"] and r not in before["roles"]]
    if before["kind"] != after["kind"]:
        if before["kind"] == "r":
            lines.append(f"replaced the empty unpartitioned {names.table} with the partitioned one")
        else:
            lines.append(f"created table {names.table} (partitioned by id range, default partition {names.table}_default)")
    if before["pub"] is None:
        lines.append(f"created publication {names.publication} (inserts only, via partition root)")
    elif before["pub"] != after["pub"]:
        lines.append(f"updated publication {names.publication} to publish inserts only, via partition root")
    if before["deliverable"] is not True and after["deliverable"] is True:
        lines.append(f"rows the connector cannot deliver are refused by {RULES}, validated")
    elif after["deliverable"] is False:
        lines.append(f"{RULES} refuse new undeliverable rows but stay NOT VALID: existing rows break them "
                     "(`postbox doctor` names them; docs/recovery.md)")
    if after["slot_stamp"] and not before["slot_stamp"]:
        lines.append("granted EXECUTE on pg_stat_reset_replication_slot(text) to postbox_owner "
                     "(retention stamps the replication slot, to tell it from a replaced one)")
    return lines + _grant_changes(before["grants"], after["grants"], policy, names)


def _grant_changes(before: set[tuple[str, str]], after: set[tuple[str, str]], policy: Retention, names: Pipeline) -> list[str]:
    """The table's grants set up, then those taken away (the retention policy says why)."""
    lines = [f"granted {privilege} on {names.table} to {grantee}" for grantee, privilege in sorted(after - before)]
    return lines + [f"revoked {privilege} on {names.table} from {grantee} (retention {policy.value})" for grantee, privilege in sorted(before - after)]
