"""Redis clients from a URL, for every command and the consumer: TLS, ACL users and Cluster.

One URL says everything, so a command line or an environment variable can carry it:

- ``redis://user:password@host:6379/0`` — one server (an ACL user; the password percent-encoded);
- ``rediss://user:password@host:6380/0?ssl_ca_certs=/etc/postbox/redis-ca.pem`` — TLS, verified
  against that CA (redis-py's own query arguments: ``ssl_cert_reqs``, ``ssl_certfile``,
  ``ssl_keyfile``, ``ssl_check_hostname``...);
- ``redis+cluster://user:password@host1:7000,host2:7001`` (or ``rediss+cluster://``) — a Redis
  Cluster, found from any of the startup nodes; every key is routed to its slot's node;
- ``redis+sentinel://user:password@s1:26379,s2:26379/<service>[/<db>]`` (or ``rediss+sentinel://``)
  — the primary of a Sentinel-watched service. The user and password are the primary's;
  ``?sentinel_username=&sentinel_password=`` the Sentinels' own. Every connection asks the
  Sentinels for the primary's address when it (re)connects (redis-py's ``Sentinel.master_for``),
  and one that reaches a demoted primary (READONLY) is dropped, so a client follows a promotion
  without a restart.

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
SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
SCHEMES = ("redis", "rediss", "unix", *CLUSTER_SCHEMES, *SENTINEL_SCHEMES)
#: Query arguments of a Sentinel URL that are the Sentinels' credentials, not the primary's.
SENTINEL_OPTIONS = ("sentinel_username", "sentinel_password")


@dataclass(frozen=True)
class ClusterURL:
    """A ``redis+cluster://`` URL taken apart: startup nodes and one node's URL for the options."""

    nodes: tuple[tuple[str, int], ...]
    #: ``redis[s]://userinfo@<first node>/<path>?<query>``: what redis-py parses for the options.
    single_node_url: str


@dataclass(frozen=True)
class SentinelURL:
    """A ``redis+sentinel://`` URL taken apart: the Sentinels, the service, and the primary's options."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    #: ``redis[s]://userinfo@<first sentinel>/<db>?<query>`` (Sentinel options left out): what
    #: redis-py parses for the primary's connection options.
    single_node_url: str
    #: The Sentinels' own credentials (``username``, ``password``) from ``sentinel_*`` arguments.
    sentinel_options: dict[str, str]


def is_cluster_url(url: str) -> bool:
    return url.split("://", 1)[0].lower() in CLUSTER_SCHEMES


def is_sentinel_url(url: str) -> bool:
    return url.split("://", 1)[0].lower() in SENTINEL_SCHEMES


def parse_cluster_url(url: str) -> ClusterURL:
    """The startup nodes of a cluster URL; ValueError says what is wrong."""
    scheme, _, rest = url.partition("://")
    netloc, sep, tail = _split_netloc(rest)
    userinfo, at, hosts = netloc.rpartition("@")
    nodes = _host_ports(hosts, "the startup nodes")
    single = f"{scheme.lower().split('+')[0]}://{userinfo}{at}{nodes[0][0]}:{nodes[0][1]}{sep}{tail}"
    return ClusterURL(tuple(nodes), single)


def parse_sentinel_url(url: str) -> SentinelURL:
    """The Sentinels, service and database of a Sentinel URL; ValueError says what is wrong."""
    from urllib.parse import parse_qsl, urlencode

    scheme, _, rest = url.partition("://")
    netloc, sep, tail = _split_netloc(rest)
    userinfo, at, hosts = netloc.rpartition("@")
    sentinels = _host_ports(hosts, "the Sentinels")
    path, query = "", tail  # after "?" (or nothing)
    if sep == "/":
        path, _, query = tail.partition("?")
    service, _, db = path.partition("/")
    if not service:
        raise ValueError("the URL names no service: end it with /<service name> (Sentinel's 'sentinel monitor <name> ...')")
    if db and not db.isdigit():
        raise ValueError(f"the database {db!r} is not a number (/<service>/<db>)")
    pairs = parse_qsl(query, keep_blank_values=True)
    options = {k.removeprefix("sentinel_"): v for k, v in pairs if k in SENTINEL_OPTIONS}
    rest_query = urlencode([(k, v) for k, v in pairs if k not in SENTINEL_OPTIONS], safe="/")
    first = sentinels[0]
    single = f"{scheme.lower().split('+')[0]}://{userinfo}{at}{first[0]}:{first[1]}/{db or 0}" + (f"?{rest_query}" if rest_query else "")
    return SentinelURL(tuple(sentinels), service, single, options)


def _host_ports(hosts: str, what: str) -> list[tuple[str, int]]:
    nodes = []
    for item in hosts.split(","):
        host, colon, port = item.strip().rpartition(":")
        if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{item.strip()!r} is not host:port (list {what} as host:port,host:port)")
        nodes.append((host.strip("[]"), int(port)))
    return nodes


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
    if scheme in SENTINEL_SCHEMES:
        parse_sentinel_url(url)
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

    if is_sentinel_url(url):
        return _sentinel_primary(url, options)
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


def _sentinel_primary(url: str, options: dict[str, Any]) -> "redis.Redis":
    """A client of the service's primary: its pool asks the Sentinels on every (re)connect.
    The Sentinels get the socket options and TLS of the primary, and their own credentials."""
    manager, service, kwargs = _sentinel_manager(url, options)
    primary: redis.Redis = manager.master_for(service, **kwargs)
    return primary


def sentinel_clients(url: str, **options: Any) -> tuple[list[tuple[str, "redis.Redis"]], str]:
    """One client per Sentinel of a ``redis+sentinel://`` URL (``host:port``, client), and the
    service: to ask each Sentinel for its own view (`postbox doctor`), not only the first that answers."""
    manager, service, _ = _sentinel_manager(url, options)
    parsed = parse_sentinel_url(url)
    return [(f"{host}:{port}", client) for (host, port), client in zip(parsed.sentinels, manager.sentinels)], service


def _sentinel_manager(url: str, options: dict[str, Any]) -> tuple[Any, str, dict[str, Any]]:
    """redis-py's Sentinel manager for the URL, its service, and the primary's connection options."""
    import redis
    from redis.sentinel import Sentinel

    parsed = parse_sentinel_url(url)
    kwargs = redis.connection.parse_url(parsed.single_node_url)  # type: ignore[no-untyped-call]
    for name in ("host", "port", "connection_class"):
        kwargs.pop(name, None)
    kwargs.update(options)
    tls = parsed.single_node_url.startswith("rediss://")
    if tls:
        kwargs["ssl"] = True
    sentinel_kwargs = {k: v for k, v in kwargs.items() if k.startswith(("socket_", "ssl"))}
    sentinel_kwargs.update(parsed.sentinel_options)
    if tls:
        sentinel_kwargs["connection_class"] = redis.SSLConnection
        sentinel_kwargs.pop("ssl", None)
    manager = Sentinel(list(parsed.sentinels), sentinel_kwargs=sentinel_kwargs)  # type: ignore[no-untyped-call]
    return manager, parsed.service, kwargs


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
