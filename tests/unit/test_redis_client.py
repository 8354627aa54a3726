"""#13.2 Redis URLs: one server, TLS with a CA, ACL users and Cluster startup nodes, as users write them."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from postbox.errors import ConfigError
from postbox.redis_client import check_url, connect, is_cluster_url, parse_cluster_url
from postbox.settings import Settings

ENV = {"POSTBOX_DATABASE_URL": "postgresql://u@h/db"}


def test_cluster_url_lists_startup_nodes_and_keeps_user_password_and_options() -> None:
    parsed = parse_cluster_url("rediss+cluster://ops:p%40ss@10.0.0.1:7000,10.0.0.2:7001/0?ssl_ca_certs=/etc/ca.pem")
    assert parsed.nodes == (("10.0.0.1", 7000), ("10.0.0.2", 7001))
    assert parsed.single_node_url == "rediss://ops:p%40ss@10.0.0.1:7000/0?ssl_ca_certs=/etc/ca.pem"
    assert is_cluster_url("REDIS+CLUSTER://h:1") and not is_cluster_url("redis://h:1")


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis+cluster://h1:7000,h2", "'h2' is not host:port"),
        ("redis+cluster://", "is not host:port"),
        ("http://h:1", "expected a URL starting with redis://"),
        ("redis://:1/0", "names no host"),
        ("redis://h:99999/0", "port is not a number"),
    ],
)
def test_bad_urls_say_what_is_wrong(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_url(url)
    with pytest.raises(ConfigError, match="POSTBOX_REDIS_URL"):
        Settings.load({**ENV, "POSTBOX_REDIS_URL": url})


def test_settings_take_tls_and_cluster_urls_and_never_show_the_password() -> None:
    for url in ("rediss://u:s3cr3t@h:6380/0?ssl_ca_certs=/ca.pem", "redis+cluster://u:s3cr3t@h1:7000,h2:7001"):
        settings = Settings.load({**ENV, "POSTBOX_REDIS_URL": url})
        assert settings.redis_url == url and "s3cr3t" not in repr(settings)


def test_rediss_url_passes_the_ca_to_the_tls_connection() -> None:
    client = connect("rediss://u:p%40ss@127.0.0.1:6380/0?ssl_ca_certs=/etc/ca.pem", socket_timeout=1)
    kwargs = client.connection_pool.connection_kwargs
    assert kwargs["ssl_ca_certs"] == "/etc/ca.pem" and kwargs["password"] == "p@ss" and kwargs["username"] == "u"
    client.close()


@given(st.text(st.characters(min_codepoint=33, max_codepoint=0x10FFFF, exclude_categories=("Cs",)), min_size=1, max_size=30))
def test_any_percent_encoded_password_survives_a_cluster_url(password: str) -> None:
    from redis.connection import parse_url

    parsed = parse_cluster_url(f"redis+cluster://user:{quote(password, safe='')}@h1:7000,h2:7001/0")
    assert parse_url(parsed.single_node_url)["password"] == password
