"""libpq connection strings as users give them: every form libpq reads, checked by libpq's own
parser, and shown with every password hidden.

A URL (``postgresql://user:pw@host:5432/db?sslmode=require``), a socket URL
(``postgresql:///db?host=/var/run/postgresql``), a service (``postgresql://?service=prod``) and a
key=value string (``host=db dbname=shop password='a b'``) are one thing to libpq. postbox accepts
exactly what libpq parses (``psycopg.conninfo``), so a string that works with psql works here,
and refuses the rest with libpq's reason, never echoing text that may be part of a password.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

SCHEMES = ("postgresql://", "postgres://")
#: libpq parameters that carry a secret.
SECRET_KEYS = ("password", "sslpassword")
MASK = "***"

#: What a connection string may look like, for an error's fix.
FORMS = ("postgresql://user:password@host:5432/dbname?sslmode=require, "
         "postgresql:///dbname?host=/var/run/postgresql, postgresql://?service=name, "
         "or host=... port=... dbname=... user=...")  # fmt: skip

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
#: A URL's userinfo: libpq ends it at the first ``@`` before any ``/``.
_URL_USERINFO = re.compile(r"[^@/]*@")
#: libpq's whitespace (C isspace), which ends a key=value string's keyword and unquoted value.
_BLANK = " \t\n\v\f\r"
#: A quoted fragment of a libpq parse error, and the messages whose fragment is a keyword.
_QUOTED = re.compile(r'"[^"]*"')
_KEYWORD_MESSAGES = ("invalid connection option", "invalid URI query parameter")


class ConninfoError(ValueError):
    """A string libpq does not read as a connection string; the message says why."""


def parse(value: str) -> dict[str, str]:
    """The parameters libpq reads from ``value`` (no defaults, no service file lookup).

    Raises :class:`ConninfoError` with the reason, which never quotes what may be a password.
    """
    from psycopg import Error
    from psycopg.conninfo import conninfo_to_dict

    try:
        return conninfo_to_dict(value)
    except (Error, UnicodeError, ValueError) as exc:
        raise ConninfoError(_reason(value, exc)) from None


def _reason(value: str, exc: Exception) -> str:
    scheme = _SCHEME.match(value)
    if scheme and not value.startswith(SCHEMES):
        return (f"{scheme.group(1)}:// is not a PostgreSQL URL scheme: libpq reads postgresql:// and postgres:// "
                "(lower case), or a key=value string")  # fmt: skip
    if isinstance(exc, UnicodeError):
        return "it is not valid UTF-8 text"
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if not message.startswith(_KEYWORD_MESSAGES):  # the fragment may be part of a password
        message = _QUOTED.sub(lambda m: m.group(0) if m.group(0) == '"="' else '"…"', message)
    if message.startswith('missing "="'):
        message += "; a value with spaces is quoted: password='a b' (\\' and \\\\ inside)"
    return f"libpq cannot read it as a connection string ({message})"


def redact(value: str) -> str | None:
    """``value`` with every password hidden, or None when libpq does not read it.

    The form is kept when the result provably hides everything (it parses to the same parameters
    with each secret replaced by ***); otherwise the parameters are written out again as
    key=value, which cannot carry a secret it was not given.
    """
    try:
        params = parse(value)
    except ConninfoError:
        return None
    if not any(params.get(k) for k in SECRET_KEYS):
        return value
    masked = {k: MASK if k in SECRET_KEYS and v else v for k, v in params.items()}
    candidate = _mask_url(value) if value.startswith(SCHEMES) else _mask_key_values(value)
    try:
        if parse(candidate) == masked:
            return candidate
    except ConninfoError:
        pass
    from psycopg.conninfo import make_conninfo

    return make_conninfo("", **masked)


def _mask_url(value: str) -> str:
    """A URL's secrets (the userinfo's password, ``?password=``, ``?sslpassword=``, keys
    percent-encoded or not) replaced by ***, read the way libpq splits a URL."""
    prefix = value.index("://") + 3
    userinfo = _URL_USERINFO.match(value, prefix)
    start = userinfo.end() if userinfo else prefix
    head = value[:start]
    user, colon, password = head[prefix:-1].partition(":")
    if userinfo and colon and password:
        head = f"{value[:prefix]}{user}:{MASK}@"
    rest, sep, query = value[start:].partition("?")
    if not sep:
        return head + rest
    items = []
    for item in query.split("&"):
        key, eq, _ = item.partition("=")
        items.append(f"{key}={MASK}" if eq and unquote(key) in SECRET_KEYS else item)
    return head + rest + "?" + "&".join(items)


def _mask_key_values(value: str) -> str:
    """A key=value string's secrets replaced by ***: each value's span as libpq's tokenizer
    finds it (a quoted value with backslash escapes, or an unquoted one up to whitespace)."""
    out, last = [], 0
    for key, start, end in _key_value_spans(value):
        if key in SECRET_KEYS:
            out += [value[last:start], MASK]
            last = end
    return "".join(out) + value[last:]


def _key_value_spans(value: str) -> list[tuple[str, int, int]]:
    """(keyword, start, end of its value) of each parameter, as libpq's conninfo_parse reads
    them; stops at the first thing it cannot read (the caller checks the result by parsing)."""
    spans, i, n = [], 0, len(value)
    while i < n:
        if value[i] in _BLANK:
            i += 1
            continue
        key_start = i
        while i < n and value[i] != "=" and value[i] not in _BLANK:
            i += 1
        key = value[key_start:i]
        while i < n and value[i] in _BLANK:
            i += 1
        if i >= n or value[i] != "=":
            break
        i += 1
        while i < n and value[i] in _BLANK:
            i += 1
        start = i
        i = _value_end(value, i)
        spans.append((key, start, i))
    return spans


def _value_end(value: str, i: int) -> int:
    """Where a key=value string's value starting at ``i`` ends (after its closing quote)."""
    n = len(value)
    quoted = i < n and value[i] == "'"
    i += quoted
    while i < n:
        if value[i] == "\\":
            i += 2
        elif quoted and value[i] == "'":
            return i + 1
        elif not quoted and value[i] in _BLANK:
            return i
        else:
            i += 1
    return min(i, n)


def host_is_local(value: str) -> bool:
    """Whether a connection string names a server on this machine: a loopback address or a unix
    socket folder. No host at all is not taken as local: PGHOST may name any server."""
    try:
        hosts = parse(value).get("host", "")
    except ConninfoError:
        return False
    return bool(hosts) and all(h in ("127.0.0.1", "localhost", "::1") or h.startswith("/") for h in hosts.split(","))


def no_database_hint(value: str) -> str | None:
    """Why a connection went to the wrong database when the string names none: libpq then uses
    PGDATABASE or the user name, which is rarely the database meant."""
    try:
        params = parse(value)
    except ConninfoError:
        return None
    if params.get("dbname") or params.get("service"):
        return None
    user = params.get("user")
    used = f"the user name ({user})" if user else "PGDATABASE or the user name"
    return f"the connection string names no database, so libpq used {used}: add /<database> to the URL, or dbname=<database>"
