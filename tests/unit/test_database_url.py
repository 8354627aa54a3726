"""#13.2 PostgreSQL URLs postbox builds: any password survives (percent-encoding), TLS options carry over."""

from __future__ import annotations

from urllib.parse import urlsplit

from hypothesis import given
from hypothesis import strategies as st
from psycopg.conninfo import conninfo_to_dict

from postbox.database_url import database_url, same_server_as
from postbox.settings import redact_url

# Everything libpq accepts in a password: any character but NUL (the URL carries it percent-encoded).
passwords = st.text(st.characters(min_codepoint=1, max_codepoint=0x10FFFF, exclude_categories=("Cs",)), min_size=1, max_size=40)
names = st.text(st.characters(min_codepoint=1, max_codepoint=0x10FFFF, exclude_categories=("Cs",)), min_size=1, max_size=20)


@given(passwords, names)
def test_any_password_and_user_read_back_unchanged_by_libpq(password: str, user: str) -> None:
    url = database_url(user=user, password=password, port=5433, dbname="postbox")
    parsed = conninfo_to_dict(url)
    assert (parsed["user"], parsed["password"], parsed["host"], parsed["port"], parsed["dbname"]) == (
        user, password, "127.0.0.1", "5433", "postbox")  # fmt: skip
    assert urlsplit(redact_url(url)).password == "***"  # and the redacted form hides it whole


def test_the_odd_characters_by_name() -> None:
    url = database_url(user="app", password="p@ss:w/o%rd?#&=", port=5432)
    assert url == "postgresql://app:p%40ss%3Aw%2Fo%25rd%3F%23%26%3D@127.0.0.1:5432/postbox"
    assert conninfo_to_dict(url)["password"] == "p@ss:w/o%rd?#&="


def test_socket_folder_goes_into_the_query() -> None:
    url = database_url(user="postgres", host="/run/my pg&co", port=15432)
    parsed = conninfo_to_dict(url)
    assert (parsed["host"], parsed["port"], parsed["user"]) == ("/run/my pg&co", "15432", "postgres")


@given(passwords)
def test_a_role_next_to_the_users_url_keeps_its_tls_options(password: str) -> None:
    app = "postgresql://postbox_app:x@db.internal:6432/shop?sslmode=verify-full&sslrootcert=/etc/pg/ca%20root.pem"
    parsed = conninfo_to_dict(same_server_as(app, user="postbox_maint", password=password))
    assert parsed["sslmode"] == "verify-full" and parsed["sslrootcert"] == "/etc/pg/ca root.pem"
    assert (parsed["host"], parsed["port"], parsed["dbname"]) == ("db.internal", "6432", "shop")
    assert (parsed["user"], parsed["password"]) == ("postbox_maint", password)
