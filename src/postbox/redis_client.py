"""Redis clients from a URL, for every command and the consumer: TLS, ACL users and Cluster.

One URL says everything, so a command line or an environment variable can carry it:

- ``redis://user:password@host:6379/0`` — one server (an ACL user; the password percent-encoded);
- ``rediss://user:password@host:6380/0?ssl_ca_certs=/etc/postbox/redis-ca.pem`` — TLS, verified
  against that CA (redis-py's own query arguments: ``ssl_cert_reqs``, ``ssl_certfile``,
  ``ssl_keyfile``, ``ssl_check_hostname``...);
- ``redis+cluster://user:password@host1:7000,host2:7001`` (or ``rediss+cluster://``) — a Redis
  Cluster, found from any of the startup nodes; every key is routed to its slot's node.

Two mistakes get a configuration error instead of a retry loop or a misleading engine error:
a refused login or TLS handshake (:func:`login_error`), and a Cluster node named by a plain
``redis://`` URL (:func:`check_not_cluster_node`), which would otherwise fail later with CROSSSLOT
or MOVED replies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from postbox.errors import ConfigError

if TYPE_CHECKING:
    import redis

CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
SCHEMES = ("redis", "rediss", "unix", *CLUSTER_SCHEMES)


@dataclass(frozen=True)
class ClusterURL:
    """A ``redis+cluster://`` URL taken apart: startup nodes and one node's URL for the options."""

    nodes: tuple[tuple[str, int], ...]
    #: ``redis[s]://userinfo@<first node>/<path>?<query>``: what redis-py parses for the options.
    single_node_url: str


def is_cluster_url(url: str) -> bool:
    return url.split("://", 1)[0].lower() in CLUSTER_SCHEMES


def parse_cluster_url(url: str) -> ClusterURL:
    """The startup nodes of a cluster URL; ValueError says what is wrong."""
    scheme, _, rest = url.partition("://")
    netloc, sep, tail = _split_netloc(rest)
    userinfo, at, hosts = netloc.rpartition("@")
    nodes = []
    for item in hosts.split(","):
        host, colon, port = item.strip().rpartition(":")
        if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{item.strip()!r} is not host:port (list the startup nodes as host:port,host:port)")
        nodes.append((host.strip("[]"), int(port)))
    single = f"{scheme.lower().split('+')[0]}://{userinfo}{at}{nodes[0][0]}:{nodes[0][1]}{sep}{tail}"
    return ClusterURL(tuple(nodes), single)


def _split_netloc(rest: str) -> tuple[str, str, str]:
    for i, ch in enumerate(rest):
        if ch in "/?":
            return rest[:i], ch, rest[i + 1 :]
    return rest, "", ""


def check_url(url: str) -> None:
    """ValueError when ``url`` cannot name a Redis server or cluster."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme not in SCHEMES:
        raise ValueError(f"expected a URL starting with {' or '.join(s + '://' for s in SCHEMES)}")
    if scheme in CLUSTER_SCHEMES:
        parse_cluster_url(url)
        return
    parts = urlsplit(url)
    if scheme != "unix" and not parts.hostname:
        raise ValueError("the URL names no host")
    try:
        _port = parts.port  # urlsplit checks the port only when asked
    except ValueError:
        raise ValueError("the port is not a number from 1 to 65535") from None
    del _port


def connect(url: str, **options: Any) -> "redis.Redis | redis.RedisCluster":
    """A client for ``url`` (bytes replies); ``options`` are redis-py connection options
    (timeouts, health checks) and apply to every node of a cluster."""
    import redis
    from redis.cluster import ClusterNode

    if not is_cluster_url(url):
        return redis.Redis.from_url(url, **options)
    parsed = parse_cluster_url(url)
    kwargs = redis.connection.parse_url(parsed.single_node_url)  # type: ignore[no-untyped-call]
    for name in ("host", "port", "db", "connection_class"):
        kwargs.pop(name, None)
    if parsed.single_node_url.startswith("rediss://"):
        kwargs["ssl"] = True
    nodes = [ClusterNode(host, port) for host, port in parsed.nodes]  # type: ignore[no-untyped-call]
    return redis.RedisCluster(startup_nodes=nodes, **{**kwargs, **options})


def login_error(exc: BaseException, url: str | None = None) -> ConfigError | None:
    """The ConfigError for a refused Redis login or TLS handshake, else None (other errors keep
    their own class: a connection that is merely down is transient)."""
    import redis

    from postbox.settings import redact_url

    where = f"Redis at {redact_url(url)}" if url else "Redis"
    text = str(exc)
    if isinstance(exc, redis.AuthenticationError) or text.startswith(("WRONGPASS", "NOAUTH")):
        return ConfigError(
            f"{where} refused the login: {text}",
            fix="check the user and password in POSTBOX_REDIS_URL / --redis-url "
            "(redis://USER:PASSWORD@host:port/0, the password percent-encoded)",
        )
    if isinstance(exc, redis.ConnectionError) and ("certificate verify failed" in text or "wrong version number" in text):
        return ConfigError(
            f"{where}: the TLS handshake failed: {text}",
            fix="name the server's CA with ?ssl_ca_certs=/path/ca.pem on a rediss:// URL, "
            "and use rediss:// only for the TLS port (redis:// for the plain one)",
        )
    return None


def check_not_cluster_node(client: "redis.Redis | redis.RedisCluster", url: str) -> None:
    """ConfigError when a plain ``redis://`` URL names a node of a Redis Cluster."""
    import redis

    from postbox.settings import redact_url

    if isinstance(client, redis.RedisCluster):
        return
    try:
        enabled = int(client.info("cluster").get("cluster_enabled", 0))
    except redis.ResponseError:  # INFO refused (ACL) or not understood: nothing to say
        return
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        refused = login_error(exc, url)
        if refused is not None:
            raise refused from None
        return  # Redis is away: the caller's own call says so (and is retried)
    if enabled:
        shown = redact_url(url)
        scheme, _, rest = shown.partition("://")
        raise ConfigError(
            f"Redis at {shown} is a node of a Redis Cluster, but the URL names it as a single server "
            "(keys of other slots would fail with CROSSSLOT or MOVED)",
            fix=f"use {scheme}+cluster://{rest.split('/', 1)[0]} (any node, or several comma-separated) in "
            "POSTBOX_REDIS_URL / --redis-url, so each key goes to its slot's node",
        )
