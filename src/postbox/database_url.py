"""PostgreSQL URLs that postbox builds (the local stack's roles, the maintenance role next to the
app's): one function, so a password with ``@``, ``:``, ``/``, ``%`` or spaces is percent-encoded
everywhere, and a URL derived from the user's keeps its TLS options (``sslmode=verify-full``,
``sslrootcert=...``).

Connection strings the user gives (``POSTBOX_DATABASE_URL``) pass to libpq unchanged, in any form
it reads (postbox.conninfo): ``?sslmode=verify-full&sslrootcert=/etc/postbox/pg-ca.pem`` works as
it does with psql.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import quote, urlencode


def database_url(
    *,
    user: str,
    password: str | None = None,
    host: str = "127.0.0.1",
    port: int | str | None = None,
    dbname: str = "postbox",
    params: Mapping[str, str] | None = None,
) -> str:
    """``postgresql://user:password@host:port/dbname?params`` with every part encoded. A ``host``
    that is a folder (a unix socket directory) goes into the query, as libpq reads it."""
    query = dict(params or {})
    auth = quote(user, safe="") + (f":{quote(password, safe='')}" if password is not None else "")
    if host.startswith("/"):
        query = {"host": host, **({"port": str(port)} if port else {}), **query}
        netloc = f"{auth}@"
    else:
        netloc = f"{auth}@{host}" + (f":{port}" if port else "")
    tail = f"?{urlencode(query, quote_via=quote)}" if query else ""
    return f"postgresql://{netloc}/{quote(dbname, safe='')}{tail}"


def same_server_as(url: str, *, user: str, password: str | None) -> str:
    """A connection string for another role on the server, database and TLS options of ``url``,
    which may be in any form libpq reads (URL, socket URL, service, key=value). The result is a
    key=value string (libpq's quoting carries any password); ``password=None`` keeps none."""
    from psycopg.conninfo import make_conninfo

    from postbox.conninfo import parse

    params = {k: v for k, v in parse(url).items() if k != "password"}
    return make_conninfo("", **{**params, "user": user, **({"password": password} if password is not None else {})})
