"""#13.2 Redis URLs: one server, TLS with a CA, ACL users and Cluster startup nodes, as users write them."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from postbox.errors import ConfigError
from postbox.redis_client import check_url, connect, is_cluster_url, parse_cluster_url, parse_sentinel_url
from postbox.settings import Settings, redact_url

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
        ("redis+sentinel://h1:26379,h2:26379", "names no service"),
        ("redis+sentinel://h1:26379/", "names no service"),
        ("redis+sentinel://h1:26379,h2/postbox", "'h2' is not host:port"),
        ("redis+sentinel://h1:26379/postbox/x", "database 'x' is not a number"),
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


def test_sentinel_url_lists_the_sentinels_the_service_and_keeps_the_masters_options() -> None:
    """``redis+sentinel://user:password@s1:26379,s2:26379/<service>[/<db>]``: the Sentinels to ask
    for the service's primary; the user and password are the primary's (the consumer's ACL user);
    ``sentinel_username`` / ``sentinel_password`` are the Sentinels' own, kept out of the primary's."""
    parsed = parse_sentinel_url("rediss+sentinel://ops:p%40ss@10.0.0.1:26379,[::1]:26380/orders/2"
                                "?ssl_ca_certs=/etc/ca.pem&sentinel_password=s3nt&socket_timeout=5")
    assert parsed.sentinels == (("10.0.0.1", 26379), ("::1", 26380)) and parsed.service == "orders"
    assert parsed.single_node_url == "rediss://ops:p%40ss@10.0.0.1:26379/2?ssl_ca_certs=/etc/ca.pem&socket_timeout=5"
    assert parsed.sentinel_options == {"password": "s3nt"}
    check_url("redis+sentinel://h1:26379/postbox")


def test_a_sentinel_client_asks_the_sentinels_for_the_primary() -> None:
    """No connection is made until a command: the client's pool asks the Sentinels for the
    primary's address on every (re)connect, so a promotion is followed without a restart."""
    from redis.sentinel import SentinelConnectionPool

    client = connect("redis+sentinel://u:pw@127.0.0.1:26379,127.0.0.1:26380/orders/1?sentinel_password=s", socket_timeout=1)
    pool = client.connection_pool
    assert isinstance(pool, SentinelConnectionPool) and pool.service_name == "orders" and pool.is_master
    kwargs = pool.connection_kwargs
    assert kwargs["username"] == "u" and kwargs["password"] == "pw" and kwargs["db"] == 1 and kwargs["socket_timeout"] == 1
    sentinels = pool.sentinel_manager.sentinels
    assert [s.connection_pool.connection_kwargs["port"] for s in sentinels] == [26379, 26380]
    assert sentinels[0].connection_pool.connection_kwargs["password"] == "s"
    assert sentinels[0].connection_pool.connection_kwargs["socket_timeout"] == 1
    client.close()


def test_a_sentinel_url_never_shows_its_passwords() -> None:
    url = "redis+sentinel://u:s3cr3t@h1:26379,h2:26379/orders?sentinel_password=s3nt1nel"
    settings = Settings.load({**ENV, "POSTBOX_REDIS_URL": url})
    assert settings.redis_url == url
    for shown in (repr(settings), redact_url(url)):
        assert "s3cr3t" not in shown and "s3nt1nel" not in shown and "h2:26379/orders" in shown
