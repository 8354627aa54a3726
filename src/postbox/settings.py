"""Where the infrastructure is: one place that every command and library entry point reads.

The four settings come from ``POSTBOX_DATABASE_URL``, ``POSTBOX_KAFKA_BOOTSTRAP``,
``POSTBOX_REDIS_URL`` and ``POSTBOX_CONNECT_URL``; flags with the same meaning override them, and
the defaults point at the local stack (`postbox up`). Values are validated when read, so a typo
fails at start with the variable's name instead of deep inside a client library.

Kafka client properties (TLS, SASL, anything librdkafka takes) ride along as
:class:`~postbox.kafka_config.KafkaProperties`: the file named by ``POSTBOX_KAFKA_CONFIG`` (or
``--kafka-config``) with ``-X key=value`` on top. A ``bootstrap.servers`` among them is the
bootstrap when no flag says otherwise: ``--kafka-bootstrap`` > ``-X bootstrap.servers`` >
``POSTBOX_KAFKA_BOOTSTRAP`` > the file's ``bootstrap.servers`` > the local stack.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, fields, replace
from typing import Any, Iterable, Mapping
from urllib.parse import urlsplit

from postbox.secret_env import env_source, env_value
from postbox.errors import ConfigError
from postbox.kafka_config import ENV_VAR as KAFKA_CONFIG_ENV
from postbox.kafka_config import SET_FLAG, KafkaProperties

LOCAL_PG_PORT = 5432
LOCAL_REDIS_PORT = 6379
LOCAL_KAFKA_PORT = 9092
LOCAL_CONNECT_PORT = 8083
LOCAL_SENTINEL_PORT = 26379

#: The app role's connection on the local stack, without its password: `postbox up` generates the
#: password into the state folder's secrets file; the CLI reads it there (postbox.stack.addresses)
#: and hands it in as ``Settings.load(local=...)``: the library never reads the state folder.
DEFAULT_DATABASE_URL = f"postgresql://postbox_app@127.0.0.1:{LOCAL_PG_PORT}/postbox"
DEFAULT_KAFKA_BOOTSTRAP = f"127.0.0.1:{LOCAL_KAFKA_PORT}"
DEFAULT_REDIS_URL = f"redis://127.0.0.1:{LOCAL_REDIS_PORT}/0"
DEFAULT_CONNECT_URL = f"http://127.0.0.1:{LOCAL_CONNECT_PORT}"

ENV_NAMES = {
    "database_url": "POSTBOX_DATABASE_URL",
    "kafka_bootstrap": "POSTBOX_KAFKA_BOOTSTRAP",
    "redis_url": "POSTBOX_REDIS_URL",
    "connect_url": "POSTBOX_CONNECT_URL",
}


#: Parameters that carry a password: redis-py's and libpq's ``password``, libpq's ``sslpassword``,
#: a Sentinel URL's ``sentinel_password`` (postbox.redis_client).
_SECRET_PARAMS = ("password", "sslpassword", "sentinel_password")
_QUERY_SECRET = re.compile(r"(^|&)(" + "|".join(_SECRET_PARAMS) + r")=[^&#]*")
#: A key=value DSN's value: a quoted one (backslash escapes) or a word.
_DSN_SECRET = re.compile(r"(\b(?:" + "|".join(_SECRET_PARAMS) + r")\s*=\s*)(?:'(?:[^'\\]|\\.)*'|\S+)")


def redact_url(url: str) -> str:
    """The URL (or any libpq connection string) with every password replaced by ***, for anything
    printed or logged: the URL's own (``user:PASSWORD@``) and the parameters that carry one
    (``?password=``, ``?sslpassword=``; ``password=`` in a key=value string), which redis-py and
    libpq accept. A PostgreSQL string is read by libpq's own parser (postbox.conninfo)."""
    from postbox.conninfo import redact

    shown = redact(url)
    if shown is not None:
        return shown
    if "://" not in url:
        return _DSN_SECRET.sub(r"\1***", url)
    parts = urlsplit(url)
    netloc = parts.netloc
    if parts.password:
        netloc = netloc.replace(f":{parts.password}@", ":***@", 1)
    query = _QUERY_SECRET.sub(r"\1\2=***", parts.query)
    if netloc == parts.netloc and query == parts.query:
        return url
    return parts._replace(netloc=netloc, query=query).geturl()


@dataclass(frozen=True, repr=False)
class Settings:
    """The infrastructure endpoints postbox talks to."""

    database_url: str = DEFAULT_DATABASE_URL
    kafka_bootstrap: str = DEFAULT_KAFKA_BOOTSTRAP
    redis_url: str = DEFAULT_REDIS_URL
    connect_url: str = DEFAULT_CONNECT_URL
    #: librdkafka properties of every Kafka client (file + ``-X``); empty on a plain local stack.
    kafka_properties: KafkaProperties = field(default_factory=KafkaProperties)
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def load(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        kafka_config: str | None = None,
        kafka_set: Iterable[str] = (),
        local: Mapping[str, str] | None = None,
        **overrides: str | None,
    ) -> "Settings":
        """Read the environment, apply non-empty overrides (flags), validate, and return.

        ``kafka_config`` (the ``--kafka-config`` flag, else ``POSTBOX_KAFKA_CONFIG``) names a
        librdkafka properties file; ``kafka_set`` are ``-X key=value`` assignments over it.
        ``local``: the local stack's variables (``POSTBOX_DATABASE_URL`` with its generated
        password, ...), handed in by the CLI; each is used where the environment sets none.
        """
        env = os.environ if environ is None else environ
        kafka = KafkaProperties.load(
            kafka_config or env.get(KAFKA_CONFIG_ENV) or None, kafka_set,
            file_source="--kafka-config" if kafka_config else KAFKA_CONFIG_ENV,
        )  # fmt: skip
        values: dict[str, str] = {}
        sources: dict[str, str] = {}
        for name, var in ENV_NAMES.items():
            values[name], sources[name] = _resolve(name, var, overrides.get(name), kafka, env, local)
        unknown = set(overrides) - set(ENV_NAMES)
        if unknown:
            raise TypeError(f"unknown setting(s): {', '.join(sorted(unknown))}")
        settings = cls(**values, kafka_properties=kafka, sources=sources)
        settings.validate()
        return settings

    def __repr__(self) -> str:
        return (
            f"Settings(database_url={redact_url(self.database_url)!r}, kafka_bootstrap={self.kafka_bootstrap!r}, "
            f"redis_url={redact_url(self.redis_url)!r}, connect_url={redact_url(self.connect_url)!r}, "
            f"kafka_properties={self.kafka_properties!r})"
        )

    def with_overrides(self, **overrides: str | None) -> "Settings":
        """Return a copy with the given non-empty values replaced (and validated)."""
        changed: dict[str, Any] = {k: v for k, v in overrides.items() if v}
        new = replace(self, **changed)
        new.validate()
        return new

    def validate(self) -> None:
        """Raise ConfigError naming the variable whose value cannot be used."""
        _check_database_url(self.database_url)
        _check_redis_url(self.redis_url)
        _check_url("connect_url", self.connect_url, ("http", "https"))
        _check_bootstrap(self.kafka_bootstrap)

    def as_env(self) -> dict[str, str]:
        """The settings as the environment variables that reproduce them (``-X`` properties have
        no variable: write them with :meth:`KafkaProperties.write` for a child process)."""
        env = {ENV_NAMES[f.name]: getattr(self, f.name) for f in fields(self) if f.name in ENV_NAMES}
        if self.kafka_properties.file is not None:
            env[KAFKA_CONFIG_ENV] = str(self.kafka_properties.file)
        return env


def _resolve(
    name: str, var: str, override: str | None, kafka: KafkaProperties,
    env: Mapping[str, str], local: Mapping[str, str] | None,
) -> tuple[str, str]:
    """One setting's value and where it came from, in the order of precedence the module states
    (flag > ``-X bootstrap.servers`` > environment > properties file > local stack > default)."""
    from_properties = kafka.values.get("bootstrap.servers") if name == "kafka_bootstrap" else None
    if override:
        return override, "flag"
    if from_properties and kafka.origin("bootstrap.servers") == SET_FLAG:
        return from_properties, SET_FLAG
    if env_value(var, env):
        return env_value(var, env) or "", env_source(var, env)
    if from_properties:
        return from_properties, kafka.origin("bootstrap.servers")
    if local and local.get(var):
        return local[var], "local stack"
    return _local_default(name, env), "default"


def _check_url(name: str, value: str, schemes: tuple[str, ...]) -> None:
    var = ENV_NAMES[name]
    parts = urlsplit(value)
    shown = _without_password(value)  # the error is printed and logged
    if parts.scheme not in schemes:
        raise ConfigError(
            f"{var}={shown!r}: expected a URL starting with {' or '.join(s + '://' for s in schemes)}",
            fix=f"set {var} to e.g. {getattr(Settings, name)}",
        )
    if parts.scheme != "unix" and not parts.hostname:
        raise ConfigError(f"{var}={shown!r}: the URL names no host", fix=f"e.g. {getattr(Settings, name)}")
    try:
        _ = parts.port  # urlsplit parses the port only when asked
    except ValueError:
        raise ConfigError(f"{var}={shown!r}: the port is not a number from 1 to 65535") from None


def _check_database_url(value: str) -> None:
    """Any connection string libpq reads (URL, socket URL, service, key=value), nothing else."""
    from postbox.conninfo import FORMS, ConninfoError, parse

    var = ENV_NAMES["database_url"]
    try:
        parse(value)
    except ConninfoError as exc:
        raise ConfigError(f"{var}={_without_password(value)!r}: {exc}",
                          fix=f"set {var} to a connection string psql takes: {FORMS}") from None


#: ``scheme://user:<password>@`` (up to the last ``@``: an unencoded ``@`` in a password is masked
#: too) and libpq's ``password=...`` (a key=value string given where a URL belongs).
_URL_PASSWORD = re.compile(r"^([a-z][a-z0-9+.-]*://[^:/@]*):.*@", re.IGNORECASE)
_KV_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'?|.*?(?=\s+\w+\s*=|$))", re.IGNORECASE | re.DOTALL)


def _without_password(value: str) -> str:
    """A refused URL setting as it may be shown: any password in it replaced by ***."""
    return _KV_PASSWORD.sub(r"\1***", _URL_PASSWORD.sub(r"\1:***@", value))


def _check_redis_url(value: str) -> None:
    """One server (redis://, rediss://, unix://), a cluster (redis+cluster://h:p,h:p) or a
    Sentinel-watched primary (redis+sentinel://h:p,h:p/service)."""
    from postbox.redis_client import check_url

    var = ENV_NAMES["redis_url"]
    try:
        check_url(value)
    except ValueError as exc:
        raise ConfigError(
            f"{var}={_without_password(value)!r}: {exc}",
            fix=f"set {var} to e.g. {DEFAULT_REDIS_URL}, rediss://user:password@host:6380/0?ssl_ca_certs=/path/ca.pem "
            "or redis+cluster://user:password@host1:7000,host2:7001 or redis+sentinel://user:password@s1:26379,s2:26379/<service>",
        ) from None


def _check_bootstrap(value: str) -> None:
    var = ENV_NAMES["kafka_bootstrap"]
    for server in value.split(","):
        host, sep, port = server.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(
                f"{var}={value!r}: {server.strip()!r} is not host:port",
                fix=f"set {var} to a comma-separated list like {DEFAULT_KAFKA_BOOTSTRAP}",
            )


def _local_default(name: str, env: Mapping[str, str]) -> str:
    """The local stack's address for a setting, following POSTBOX_*_PORT when the stack was moved."""
    def port(var: str, default: int) -> str:
        return env.get(var) or str(default)

    return {
        "database_url": f"postgresql://postbox_app@127.0.0.1:{port('POSTBOX_PG_PORT', LOCAL_PG_PORT)}/postbox",
        "kafka_bootstrap": f"127.0.0.1:{port('POSTBOX_KAFKA_PORT', LOCAL_KAFKA_PORT)}",
        "redis_url": f"redis://127.0.0.1:{port('POSTBOX_REDIS_PORT', LOCAL_REDIS_PORT)}/0",
        "connect_url": f"http://127.0.0.1:{port('POSTBOX_CONNECT_PORT', LOCAL_CONNECT_PORT)}",
    }[name]
