"""Every connection string libpq reads is a database URL postbox accepts (a socket URL, a service,
a key=value string, ...), real mistakes are refused with the reason, and a password is hidden in
every form. Before, the settings check parsed a URL by hand: it refused
``postgresql:///postbox?host=/var/run/postgresql`` (the form `postbox env` prints), services and
key=value strings, and the redaction missed passwords in several forms."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from postbox.conninfo import host_is_local, no_database_hint
from postbox.errors import ConfigError
from postbox.settings import Settings, redact_url


@pytest.mark.parametrize("url", [
    "postgresql:///postbox?host=/var/run/postgresql",
    "postgresql://?service=prod",
    "postgres://app@db.internal/shop",
    "postgresql://app@%2Fvar%2Frun%2Fpostgresql/shop",
    "postgresql://app@[::1]:5433/shop",
    "postgresql://h1:5432,h2:5433/shop?target_session_attrs=read-write",
    "host=db.internal port=6432 dbname=shop user=app sslmode=verify-full",
    "host=/var/run/postgresql dbname=postbox",
    "service=prod",
    "dbname='my shop' password='a b\\'c'",
])  # fmt: skip
def test_every_libpq_form_is_a_database_url(url: str) -> None:
    assert Settings.load({"POSTBOX_DATABASE_URL": url}).database_url == url


@pytest.mark.parametrize(("url", "expected"), [
    ("postgersql://app:s3cret@db/shop", "postgersql:// is not a PostgreSQL URL scheme"),
    ("mysql://x@h/db", "mysql:// is not a PostgreSQL URL scheme"),
    ("host=db dbnme=shop", 'invalid connection option "dbnme"'),
    ("host=db password=my s3cret", "libpq cannot read it"),
    ("postgresql://app:pa%zzs3cret@db/shop", "invalid percent-encoded token"),
    ("host=db password='s3cret", "unterminated quoted string"),
])  # fmt: skip
def test_real_mistakes_are_refused_with_the_reason_and_no_password(url: str, expected: str) -> None:
    with pytest.raises(ConfigError) as err:
        Settings.load({"POSTBOX_DATABASE_URL": url})
    assert "POSTBOX_DATABASE_URL" in err.value.message and expected in err.value.message
    assert "s3cret" not in err.value.message and "s3cret" not in (err.value.fix or "")
    assert "postgresql:///dbname?host=" in (err.value.fix or "")


def test_a_string_that_names_no_database_is_explained_where_it_fails() -> None:
    """libpq reads a string without a database (it then uses the user name), so the settings take
    it; the connection error's fix says what happened."""
    assert "libpq used the user name (app)" in (no_database_hint("postgresql://app@db.internal") or "")
    assert no_database_hint("postgresql://app@db.internal/shop") is None
    assert no_database_hint("postgresql://?service=prod") is None


def test_local_hosts_in_every_form() -> None:
    assert host_is_local("postgresql:///postbox?host=/var/run/postgresql")
    assert host_is_local("host=127.0.0.1 dbname=postbox")
    assert not host_is_local("dbname=postbox")  # PGHOST may name any server
    assert not host_is_local("postgresql://app@db.internal/shop")


# Random strings, most of them not connection strings, and strings made of libpq's own pieces.
_piece = st.sampled_from(["postgresql://", "postgres://", "postgersql://", "host=", "dbname=", "password=", "'", "\\",
                          "@", ":", "/", "?", "&", "=", " ", "%2F", "%zz", "service=prod", "h", "5432", ","])
_candidates = st.one_of(st.text(max_size=40), st.lists(_piece, max_size=12).map("".join))


@given(_candidates)
@example("postgresql:///postbox?host=/var/run/postgresql")
@example("")
def test_the_settings_accept_exactly_what_libpq_reads(text: str) -> None:
    try:
        conninfo_to_dict(text)
    except Exception:
        with pytest.raises(ConfigError):
            Settings(database_url=text).validate()
    else:
        Settings(database_url=text).validate()


# Everything libpq takes in a password (any character but NUL).
_passwords = st.text(st.characters(min_codepoint=1, max_codepoint=0x10FFFF, exclude_categories=("Cs",)), min_size=3, max_size=30)
_tricky = st.text(st.sampled_from(list(" '\"\\=&@:/?#%ü€\t")) | st.characters(min_codepoint=33, max_codepoint=126), min_size=3, max_size=20)


def _kv_quoted(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _kv_unquoted(value: str) -> str:
    return "".join("\\" + c if c.isspace() or c in "\\'" else c for c in value)


def _forms(key: str, password: str) -> list[str]:
    enc = quote(password, safe="")
    forms = [
        f"postgresql://app@db.internal/shop?sslmode=require&{key}={enc}&application_name=x",
        f"postgres:///shop?host=/var/run/postgresql&{key}={enc}",
        f"postgresql://?service=prod&{key}={enc}",
        f"host=db.internal dbname=shop {key}={_kv_quoted(password)} user=app",
        f"host=db.internal {key} = {_kv_quoted(password)}",
        f"{key}={_kv_unquoted(password)} host=db.internal",
        make_conninfo("", host="db.internal", dbname="shop", **{key: password}),
    ]
    if key == "password":  # the URL's own, alone and beside a key's
        forms += [f"postgresql://app:{enc}@db.internal:5432/shop?sslmode=require",
                  f"postgresql://app:{enc}@db.internal/shop?sslpassword={enc}"]
    return forms


@given(st.sampled_from(["password", "sslpassword"]), _passwords | _tricky)
@example("password", "a b'c\\d=e ü")
def test_a_password_is_hidden_in_every_form(key: str, password: str) -> None:
    # A password that is part of the rest of the string (a "host" or "=", say) cannot be hidden.
    assume(not any(password in url or quote(password, safe="") in url for url in _forms(key, "\x01") + ["***"]))
    for url in _forms(key, password):
        assert conninfo_to_dict(url)[key] == password  # the form really carries this password
        shown = redact_url(url)
        assert password not in shown and quote(password, safe="") not in shown, (url, shown)
        assert conninfo_to_dict(shown)[key] == "***"  # still a connection string, its other parts kept
        assert {k: v for k, v in conninfo_to_dict(shown).items() if k not in ("password", "sslpassword")} == {
            k: v for k, v in conninfo_to_dict(url).items() if k not in ("password", "sslpassword")}
        assert f"database_url={shown!r}" in repr(Settings(database_url=url))


def test_the_form_is_kept_where_it_can_be() -> None:
    assert redact_url("postgresql://app:s3cret@db/shop?sslmode=require") == "postgresql://app:***@db/shop?sslmode=require"
    assert redact_url("postgresql:///shop?host=/run/pg&password=s3cret") == "postgresql:///shop?host=/run/pg&password=***"
    assert redact_url("host=db password='s 3 cret' dbname=shop") == "host=db password=*** dbname=shop"
    assert redact_url("host=db dbname=shop") == "host=db dbname=shop"


@pytest.mark.parametrize("url", [
    "postgresql://h/db?pass%77ord=first-pw&password=second-pw",  # libpq decodes keys; the last one wins
    "host='db'password=first-pw password=second-pw",  # a keyword right after a closing quote
    "password=first-pw\tsslpassword='second-pw'",
])  # fmt: skip
def test_an_overridden_or_oddly_placed_password_is_hidden_too(url: str) -> None:
    shown = redact_url(url)
    assert "first-pw" not in shown and "second-pw" not in shown, shown
