"""Every Kafka client postbox opens gets its configuration here, in one place.

A team's cluster needs TLS, SASL or anything else librdkafka takes, and postbox cannot guess it.
As with kcat, the user gives librdkafka properties in a java-properties file (named by
``POSTBOX_KAFKA_CONFIG`` or ``--kafka-config``) and as repeatable ``-X key=value`` flags.
Precedence, lowest first: the role's built-in defaults < the file < ``-X`` < what the role owns.

A role owns the settings its guarantees rest on (``enable.auto.commit=false`` of the consumer,
``acks=all`` of the dead-letter producer, the Java-compatible partitioner of the replay
producer...) and the ones postbox sets from its own options (``group.id`` from ``--group``). A
user value for an owned setting is accepted only when it equals postbox's; any other value is a
:class:`~postbox.errors.ConfigError` naming where it came from, because silently overriding it
would either break exactly-once or ignore the user.

Secrets are never shown: :func:`redact` masks every ``*password*``/``*secret*`` property (and the
inline private key), and :meth:`KafkaProperties.scrub` removes their values from any text
(librdkafka error strings) before it is printed or logged.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TypeVar

from postbox.errors import ConfigError

T = TypeVar("T")

#: The environment variable naming the properties file.
ENV_VAR = "POSTBOX_KAFKA_CONFIG"
#: The flag that sets one property (repeatable), as kcat's.
SET_FLAG = "-X"
MASK = "***"
#: Java's sasl.jaas.config (refused by librdkafka, but a shared file may hold one) embeds a password.
_SECRET_KEY = re.compile(r"password|secret|jaas|^ssl\.key\.pem$|^sasl\.oauthbearer\.config$", re.IGNORECASE)
_KEY = re.compile(r"[A-Za-z0-9_.\-]+\Z")
#: Java's line terminators only (str.splitlines would also break at \x85, \u2028, \x1c...).
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def is_secret(key: str) -> bool:
    """True for properties whose value must never be printed."""
    return bool(_SECRET_KEY.search(key))


def redact(properties: Mapping[str, Any]) -> dict[str, Any]:
    """The properties with every secret value replaced by ``***`` (for output and logs)."""
    return {k: (MASK if is_secret(k) else v) for k, v in properties.items()}


# -- reading the user's properties ------------------------------------------------------------------


def parse_properties(text: str) -> list[tuple[str, str, int]]:
    """``(key, value, line)`` of a java-properties text: ``#``/``!`` comments, ``=``, ``:`` or
    blank as separator, a trailing backslash continues the line, backslash escapes (``\\t``,
    ``\\n``, ``\\uXXXX``, ``\\=``...). kcat's ``-F`` files are the simple case of this syntax."""
    entries: list[tuple[str, str, int]] = []
    logical, start = "", 0
    for number, raw in enumerate(_LINE_BREAK.split(text), start=1):
        line = raw.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        if not logical:
            start = number
        if _continues(line):
            logical += line[:-1]
            continue
        logical += line
        key, value = _split_entry(logical)
        entries.append((key, value, start))
        logical = ""
    if logical:
        key, value = _split_entry(logical)
        entries.append((key, value, start))
    return entries


def _continues(line: str) -> bool:
    """A line ending in an odd number of backslashes continues on the next one."""
    trailing = len(line) - len(line.rstrip("\\"))
    return trailing % 2 == 1


def _split_entry(line: str) -> tuple[str, str]:
    i, key = 0, []
    while i < len(line) and line[i] not in "=: \t\f":
        if line[i] == "\\" and i + 1 < len(line):
            key.append(line[i : i + 2])
            i += 2
            continue
        key.append(line[i])
        i += 1
    rest = line[i:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return _unescape("".join(key)), _unescape(rest)


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str) -> str:
    return re.sub(
        r"\\(u[0-9a-fA-F]{4}|.)",
        lambda m: chr(int(m.group(1)[1:], 16)) if len(m.group(1)) == 5 else _ESCAPES.get(m.group(1), m.group(1)),
        text,
    )


def _escape(text: str, *, key: bool) -> str:
    """``text`` as java-properties writes it (what :func:`parse_properties` reads back)."""
    out = []
    for i, ch in enumerate(text):
        if ch == "\\" or ch in "=:#!" or (ch == " " and (key or i == 0)):
            out.append("\\" + ch)
        elif ch in _UNESCAPES:
            out.append("\\" + _UNESCAPES[ch])
        else:
            out.append(ch)
    return "".join(out)


_UNESCAPES = {v: k for k, v in _ESCAPES.items()}


def parse_assignment(text: str) -> tuple[str, str]:
    """``key=value`` of one ``-X``; ValueError says what is wrong."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ValueError(f"{SET_FLAG} {text!r}: expected key=value, e.g. -X security.protocol=SASL_SSL")
    return key, value


@dataclass(frozen=True, repr=False)
class KafkaProperties:
    """The user's librdkafka properties (file, then ``-X`` on top), each with where it came from."""

    values: Mapping[str, str] = field(default_factory=dict)
    #: ``<file>:<line>`` or ``-X`` per key: errors name it.
    origins: Mapping[str, str] = field(default_factory=dict)
    file: Path | None = None

    @classmethod
    def load(cls, file: str | Path | None = None, assignments: Iterable[str] = (), *,
             file_source: str = ENV_VAR) -> "KafkaProperties":  # fmt: skip
        """Read ``file`` (if any) and apply the ``-X key=value`` assignments over it.
        ``file_source`` names where the file's name came from, for errors."""
        values: dict[str, str] = {}
        origins: dict[str, str] = {}
        path = Path(file).expanduser() if file else None
        if path is not None:
            for key, value, line in _read_file(path, file_source):
                values[key], origins[key] = value, f"{path}:{line}"
        for text in assignments:
            try:
                key, value = parse_assignment(text)
            except ValueError as exc:
                raise ConfigError(str(exc), fix="write each property as -X key=value") from None
            values[key], origins[key] = value, SET_FLAG
        for key in values:
            if not _KEY.match(key):
                raise ConfigError(f"{origins[key]}: {key!r} is not a librdkafka property name",
                                  fix="see librdkafka's CONFIGURATION.md for the property names")  # fmt: skip
        return cls(values=values, origins=origins, file=path)

    def __bool__(self) -> bool:
        return bool(self.values)

    def __repr__(self) -> str:
        return f"KafkaProperties({redact(self.values)!r}, file={str(self.file) if self.file else None!r})"

    def origin(self, key: str) -> str:
        return self.origins.get(key, "postbox")

    def describe(self) -> dict[str, Any]:
        """What `postbox env`, `--check` and the start-up log show: secrets masked."""
        return {
            "file": str(self.file) if self.file else None,
            "properties": {k: {"value": v, "from": self.origins[k]} for k, v in redact(self.values).items()},
        }

    def write(self, path: Path) -> Path:
        """Write every property (file and ``-X``) as a properties file only its owner may read:
        how a child process gets them without secrets on its command line."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600, exist_ok=True)
        path.chmod(0o600)
        path.write_text("".join(f"{_escape(k, key=True)}={_escape(v, key=False)}\n" for k, v in self.values.items()))
        return path

    def scrub(self, text: str) -> str:
        """``text`` with every secret value in it replaced by ``***``."""
        for key, value in self.values.items():
            if is_secret(key) and value:
                text = text.replace(value, MASK)
        return text


def _read_file(path: Path, source: str) -> list[tuple[str, str, int]]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{source}={path}: no such file", fix=f"set {ENV_VAR} (or --kafka-config) to a librdkafka properties file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{source}={path}: cannot read it ({exc})", fix="make it a readable UTF-8 properties file") from None
    return parse_properties(text)


# -- the roles ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Role:
    """One kind of client postbox opens: its defaults (the user may change them) and what it owns."""

    name: str
    defaults: Mapping[str, Any] = field(default_factory=dict)
    #: key -> (value, why postbox owns it / which option sets it)
    owned: Mapping[str, tuple[Any, str]] = field(default_factory=dict)


#: The request-size cap of the producers that write records another client made (dead letters,
#: replays). librdkafka's default (1,000,000 bytes) is below the broker's default
#: ``message.max.bytes`` (1,048,588), so it refused records the topic takes; the topic's
#: ``max.message.bytes`` is what decides.
LARGE_RECORD_REQUEST_BYTES = 100 * 1024 * 1024

_NO_COMMIT = "offsets are committed by postbox only after the effects are durable in Redis"
_NO_LOSS = "a dead letter must survive a broker failure (acks=all, idempotent)"
_SAME_PARTITION = "replayed records must land in the partition Debezium's Java producer chose for the key"
_READ_ONLY = "incident commands read without joining a group or committing anything"


def consumer_role(*, group: str, client_id: str, auto_offset_reset: str, session_timeout_ms: int,
                  max_poll_interval_ms: int, instance_id: str | None = None) -> Role:  # fmt: skip
    """The runtime's group consumer (``postbox consume``); ``instance_id``: static membership
    (``group.instance.id``, see :mod:`postbox.consumer.instance`), None for a dynamic member."""
    static = {"group.instance.id": (instance_id, "set it with --instance-id / POSTBOX_INSTANCE_ID")} if instance_id else {}
    return Role(
        name="consumer",
        defaults={
            "client.id": client_id,
            # A member learns of a rebalance from a heartbeat's answer, so when another leaves (a
            # SIGTERM, a deploy) its partitions wait up to one interval: a fifth of the session,
            # at most Kafka's default 3 s (a fifth alone was 9 s at the default 45 s session).
            "heartbeat.interval.ms": max(500, min(3_000, session_timeout_ms // 5)),
            "topic.metadata.refresh.interval.ms": 5000,
        },
        owned={
            "group.id": (group, "set it with --group / POSTBOX_GROUP"),
            "auto.offset.reset": (auto_offset_reset, "set it with --auto-offset-reset / POSTBOX_AUTO_OFFSET_RESET"),
            "session.timeout.ms": (session_timeout_ms, "set it with --session-timeout-ms / POSTBOX_SESSION_TIMEOUT_MS"),
            "max.poll.interval.ms": (max_poll_interval_ms, "set it with --max-poll-interval-ms / POSTBOX_MAX_POLL_INTERVAL_MS"),
            "enable.auto.commit": (False, _NO_COMMIT),
            "enable.auto.offset.store": (False, _NO_COMMIT),
            "partition.assignment.strategy": ("cooperative-sticky", "the runtime's rebalance callbacks are incremental"),
            **static,
        },
    )


def dead_letter_producer_role(*, client_id: str, delivery_timeout_ms: int) -> Role:
    """The runtime's dead-letter producer."""
    return Role(
        name="dead-letter producer",
        defaults={
            "client.id": client_id,
            "linger.ms": 2,
            "message.max.bytes": LARGE_RECORD_REQUEST_BYTES,
            "delivery.timeout.ms": delivery_timeout_ms,
            "request.timeout.ms": min(delivery_timeout_ms, 10_000),
        },
        owned={"acks": ("all", _NO_LOSS), "enable.idempotence": (True, _NO_LOSS)},
    )


def admin_role(client_id: str | None = None) -> Role:
    """Metadata, topic creation, offsets of groups (runtime and incident commands)."""
    return Role(name="admin client", defaults={"client.id": client_id} if client_id else {})


def reader_role(*, group: str) -> Role:
    """The incident commands' assign-only consumer (tail, trace, dlq, lag's timestamps)."""
    return Role(
        name="reader",
        defaults={"auto.offset.reset": "earliest", "isolation.level": "read_committed"},
        owned={
            "group.id": (group, _READ_ONLY),
            "enable.auto.commit": (False, _READ_ONLY),
            "enable.auto.offset.store": (False, _READ_ONLY),
            "enable.partition.eof": (True, "the reader stops at the end of each partition"),
        },
    )


def writer_role(*, message_timeout_ms: int) -> Role:
    """The incident commands' producer (dlq replay, the audit trail)."""
    return Role(
        name="replay producer",
        defaults={"message.timeout.ms": message_timeout_ms, "message.max.bytes": LARGE_RECORD_REQUEST_BYTES},
        owned={
            "acks": ("all", _NO_LOSS),
            "enable.idempotence": (True, _NO_LOSS),
            "partitioner": ("murmur2_random", _SAME_PARTITION),
        },
    )


#: librdkafka's own log lines (``%4|...|GETPID|...``), as records of this logger: every client
#: :func:`build` configures hands them to Python logging (``logger``), so they come out in the
#: process's one format (``--log-format json``) instead of as raw text on stderr.
LIBRDKAFKA_LOGGER = "postbox.librdkafka"


def build(bootstrap: str, properties: KafkaProperties, role: Role, **callbacks: Any) -> dict[str, Any]:
    """The librdkafka configuration of one client: defaults < file < ``-X`` < owned, then the
    Python callbacks (``error_cb``, ``logger``, ``on_commit``...), which no file can set. Without
    a ``logger`` among them, librdkafka logs to :data:`LIBRDKAFKA_LOGGER`."""
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, **role.defaults}
    for key, value in properties.values.items():
        if key != "bootstrap.servers":  # Settings resolved it (flag > -X > env > file)
            conf[key] = value
    for key, (value, why) in role.owned.items():
        given = properties.values.get(key)
        if given is not None and not _same(given, value):
            raise ConfigError(
                f"{properties.origin(key)}: {key}={given!r} cannot be used by postbox's {role.name} "
                f"(it needs {key}={_text(value)}: {why})",
                fix=f"remove {key} from the Kafka properties" + (f", or {why}" if why.startswith("set it") else ""),
            )
        conf[key] = value
    conf["logger"] = logging.getLogger(LIBRDKAFKA_LOGGER)
    conf.update(callbacks)
    return conf


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _same(given: str, value: Any) -> bool:
    return given.strip().lower() == _text(value).lower()


def open_client(factory: Callable[[dict[str, Any]], T], conf: dict[str, Any], properties: KafkaProperties) -> T:
    """``factory(conf)`` (a confluent-kafka client class); a property librdkafka refuses (unknown
    name, bad value) becomes a ConfigError naming it and where it came from, secrets masked."""
    from confluent_kafka import KafkaException

    try:
        return factory(conf)
    except KafkaException as exc:
        text = properties.scrub(exc.args[0].str() if exc.args and hasattr(exc.args[0], "str") else str(exc))
        named = re.search(r'property "([^"]+)"|property: "?([^"\s]+)"?', text)
        key = next((g for g in named.groups() if g), "") if named else ""
        where = f"{properties.origin(key)}: " if key in properties.values else ""
        raise ConfigError(f"{where}librdkafka refused the Kafka client configuration: {text}",
                          fix="correct or remove that property (librdkafka's CONFIGURATION.md lists them)") from None  # fmt: skip


# -- explaining what went wrong -------------------------------------------------------------------


def security_summary(properties: KafkaProperties) -> str:
    """``SASL_SSL, SCRAM-SHA-512 as alice`` — how postbox logs in, for error messages."""
    values = properties.values
    protocol = values.get("security.protocol", "PLAINTEXT").upper()
    parts = [f"security.protocol={protocol}"]
    if protocol.startswith("SASL"):
        parts.append(f"sasl.mechanism={values.get('sasl.mechanism', values.get('sasl.mechanisms', 'GSSAPI'))}")
        if values.get("sasl.username"):
            parts.append(f"user {values['sasl.username']}")
    return ", ".join(parts)


#: librdkafka error codes that mean "the settings are wrong", not "the broker is away".
LOGIN_ERROR_NAMES = ("_AUTHENTICATION", "SASL_AUTHENTICATION_FAILED", "_SSL")


def login_error(bootstrap: str, properties: KafkaProperties, message: str) -> ConfigError:
    """The ConfigError for a refused login or TLS handshake: names the listener and mechanism."""
    origins = sorted({properties.origin(k).rsplit(":", 1)[0] for k in properties.values if k.startswith(("sasl.", "ssl.", "security."))})
    origin = " and ".join(origins) or f"{ENV_VAR} / -X (none given)"
    return ConfigError(
        f"Kafka at {bootstrap} refused postbox's login ({security_summary(properties)}): {properties.scrub(message)}",
        fix=f"check the listener's address and the sasl.*/ssl.* properties in {origin} "
        "(user, password, mechanism, ssl.ca.location)",
    )


class LoginErrors:
    """An ``error_cb`` that remembers the last login or TLS failure librdkafka reported, so the
    timeout that follows can be explained as the configuration error it is."""

    def __init__(self) -> None:
        self.last: str | None = None

    def __call__(self, err: Any) -> None:
        if is_login_failure(err.name(), err.str()):
            self.last = err.str()

    def error(self, bootstrap: str, properties: KafkaProperties) -> ConfigError | None:
        return login_error(bootstrap, properties, self.last) if self.last else None


def is_login_failure(code_name: str, message: str) -> bool:
    """True when a librdkafka error says the login or the TLS handshake failed."""
    if code_name in LOGIN_ERROR_NAMES:
        return True
    lowered = message.lower()
    return "ssl handshake failed" in lowered or "sasl authentication" in lowered or (
        "incorrect security.protocol" in lowered
    )
