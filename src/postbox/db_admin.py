"""What `postbox db init`'s admin role lacks, and the statement that adds it, when PostgreSQL
refused a step: for managed PostgreSQL (RDS, Cloud SQL, Azure), whose admin is no superuser but
has CREATEROLE (and REPLICATION, or a provider role such as ``rds_replication``).

PostgreSQL's rules changed in 16. Up to 15, CREATEROLE may grant and alter any ordinary role, but
only a superuser may create or alter a REPLICATION role. From 16, CREATEROLE acts only on roles it
holds ADMIN OPTION on (those it created get it), and a role with REPLICATION may create another.
The facts are read from the server (its version, not the client's) only after a refusal, so a
provider whose patched rules allow more is never refused in advance.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from psycopg import sql

from postbox.resources import SQL_DIR

FACTS_SQL = SQL_DIR / "checks" / "admin_facts.sql"
ROLES = ("postbox_owner", "postbox_app", "postbox_cdc", "postbox_maint")
PUBLICATION = "postbox_outbox"
_PLAIN = re.compile(r"[a-z_][a-z0-9_]*")
#: Reserved words a role or database may be named (quoted) that could not stand bare.
_RESERVED = frozenset({"all", "user", "group", "role", "public", "current_user", "session_user", "default", "table", "database"})
#: The first version with PostgreSQL 16's role rules (ADMIN OPTION, REPLICATION may create REPLICATION).
PG16 = 160000


@dataclass(frozen=True)
class AdminFacts:
    """What the admin role is and holds, as admin_facts.sql reads it."""

    version: int
    admin: str
    superuser: bool
    createrole: bool
    replication: bool
    database: str
    create_in_database: bool
    schema_exists: bool
    existing: frozenset[str]
    admin_of: frozenset[str]
    replication_roles: frozenset[str]
    owner_usable: bool
    maint_in_owner: bool
    rds_replication: bool
    publication_owner: str | None
    publication_usable: bool | None
    #: The pipeline's publication these facts are about.
    publication: str = PUBLICATION

    @property
    def major(self) -> int:
        return self.version // 10000

    @property
    def cdc_via_rds_replication(self) -> bool:
        """Whether 010_roles.sql gives postbox_cdc rds_replication instead of REPLICATION (RDS)."""
        return not self.superuser and self.rds_replication and (self.version < PG16 or not self.replication)

    def may_grant(self, role: str) -> bool:
        """Whether the admin may grant membership in (or alter) an ordinary existing role."""
        return self.superuser or role in self.admin_of or (self.createrole and self.version < PG16)


@dataclass(frozen=True)
class Missing:
    """A grant the admin lacks: what it stops, and the statement that adds it."""

    what: str
    fix: str


def read_facts(conn: Any, schema: str = "postbox", publication: str = PUBLICATION) -> AdminFacts:
    """The admin's facts over an open connection (outside a failed transaction), for the
    pipeline whose outbox schema and publication are named."""
    cursor = conn.execute(FACTS_SQL.read_text(encoding="utf-8"),
                          {"roles": list(ROLES), "schema": schema, "publication": publication})
    values = dict(zip([c.name for c in cursor.description], cursor.fetchone()))
    for key in ("existing", "admin_of", "replication_roles"):
        values[key] = frozenset(values[key])
    return AdminFacts(**values)


def _q(name: str) -> str:
    """A name as psql takes it: bare when it is a plain lower-case word, else double-quoted."""
    if _PLAIN.fullmatch(name) and name not in _RESERVED:
        return name
    return sql.Identifier(name).as_string()


def missing_grants(facts: AdminFacts, passwords: Mapping[str, str]) -> list[Missing]:
    """Every grant the admin lacks for what init does; ``passwords``: role -> the variable that
    sets its password, for the roles whose password this run sets."""
    if facts.superuser:
        return []
    return [*_roles(facts), *_memberships(facts), *_passwords(facts, passwords), *_database(facts)]


def _roles(facts: AdminFacts) -> list[Missing]:
    a, out = _q(facts.admin), []
    absent = [r for r in ROLES if r not in facts.existing]
    if absent and not facts.createrole:
        out.append(Missing(f"the admin role {facts.admin} lacks CREATEROLE, and the role(s) {', '.join(absent)} do not exist yet",
                           f"as a superuser: ALTER ROLE {a} CREATEROLE"))
    if "postbox_cdc" in facts.existing or facts.cdc_via_rds_replication:
        return out
    rds = f"on RDS/Aurora: GRANT rds_replication TO {a} WITH ADMIN OPTION (as the master user), and db init gives postbox_cdc rds_replication"
    if facts.version < PG16:
        out.append(Missing(f"PostgreSQL {facts.major} lets only a superuser create the REPLICATION role postbox_cdc, and {facts.admin} is not one",
                           f"as a superuser: CREATE ROLE postbox_cdc LOGIN REPLICATION; {rds}"))
    elif not facts.replication:
        out.append(Missing(f"the admin role {facts.admin} lacks REPLICATION, which PostgreSQL {facts.major} needs to create the REPLICATION role postbox_cdc",
                           f"as a superuser: ALTER ROLE {a} REPLICATION; {rds}"))
    return out


def _memberships(facts: AdminFacts) -> list[Missing]:
    a, out = _q(facts.admin), []
    takes = f"PostgreSQL {facts.major}: that takes {'CREATEROLE or ' if facts.version < PG16 else ''}ADMIN OPTION on postbox_owner"
    if "postbox_owner" in facts.existing and not facts.owner_usable and not facts.may_grant("postbox_owner"):
        options = " WITH INHERIT TRUE, SET TRUE" if facts.version >= PG16 else ""
        out.append(Missing(f"the admin role {facts.admin} is not a member of postbox_owner and may not make itself one ({takes})",
                           f"as a superuser: GRANT postbox_owner TO {a}{options}"))
    if {"postbox_owner", "postbox_maint"} <= facts.existing and not facts.maint_in_owner and not facts.may_grant("postbox_owner"):
        out.append(Missing(f"postbox_maint is not a member of postbox_owner, and {facts.admin} may not make it one ({takes})",
                           "as a superuser: GRANT postbox_owner TO postbox_maint"))
    return out


def _passwords(facts: AdminFacts, passwords: Mapping[str, str]) -> list[Missing]:
    a, out = _q(facts.admin), []
    for role, env in passwords.items():
        if role not in facts.existing:
            continue  # created by this run: its creator may set its password
        unset = f"leave {env} unset for this run and set the password as a superuser: \\password {role} in psql"
        if facts.version < PG16 and role in facts.replication_roles:
            out.append(Missing(f"PostgreSQL {facts.major} lets only a superuser change the REPLICATION role {role}, so {facts.admin} may not set its password",
                               unset))
        elif facts.version < PG16 and not facts.createrole:
            out.append(Missing(f"the admin role {facts.admin} lacks CREATEROLE, so it may not set the password of {role}",
                               f"as a superuser: ALTER ROLE {a} CREATEROLE; or {unset}"))
        elif facts.version >= PG16 and not (facts.createrole and role in facts.admin_of):
            lacks = "CREATEROLE" if not facts.createrole else f"ADMIN OPTION on {role}"
            out.append(Missing(f"PostgreSQL {facts.major} lets a role set another's password only with CREATEROLE and ADMIN OPTION on it; "
                               f"{facts.admin} lacks {lacks}",
                               f"as a superuser: GRANT {_q(role)} TO {a} WITH ADMIN TRUE, INHERIT FALSE, SET FALSE"
                               + ("" if facts.createrole else f" and ALTER ROLE {a} CREATEROLE") + f"; or {unset}"))
    return out


def _database(facts: AdminFacts) -> list[Missing]:
    a, out = _q(facts.admin), []
    if not facts.create_in_database and (not facts.schema_exists or facts.publication_owner is None):
        out.append(Missing(f"the admin role {facts.admin} may not create the schema and publication in database {facts.database!r}",
                           f"as the database's owner or a superuser: GRANT CREATE ON DATABASE {_q(facts.database)} TO {a}"))
    if facts.publication_owner is not None and facts.publication_usable is False:
        out.append(Missing(f"publication {facts.publication} belongs to {facts.publication_owner}, and only its owner may change it",
                           f"as a superuser or {facts.publication_owner}: ALTER PUBLICATION {_q(facts.publication)} OWNER TO {a}"))
    return out
