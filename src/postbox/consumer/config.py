"""The consumer's configuration: one dataclass, read from flags and environment, validated at start.

Every field has an environment variable ``POSTBOX_<FIELD>`` and a flag ``--<field>`` with the same
name (``batch_size`` ↔ ``POSTBOX_BATCH_SIZE`` ↔ ``--batch-size``); a flag wins over the variable,
the variable over the app's own default, that over the built-in default. Infrastructure endpoints
(``POSTBOX_KAFKA_BOOTSTRAP``, ``POSTBOX_REDIS_URL``) come from :class:`postbox.settings.Settings`.
A value that cannot be used fails :meth:`ConsumerConfig.load` with a :class:`ConfigError` naming the
variable or flag it came from.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, fields, replace
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from postbox.durations import parse_duration as _parse_duration_text
from postbox import kafka_config
from postbox.consumer import instance
from postbox.consumer.logs import LOG_STDERR
from postbox.consumer.retry_budget import RetryBudget
from postbox.effects import replicas
from postbox.effects.engine import DEFAULT_MARKER_TTL
from postbox.effects.replicas import Replicas
from postbox.errors import ConfigError
from postbox.kafka_config import KafkaProperties
from postbox.settings import Settings, redact_url
from postbox.topics import DLQ_SUFFIX

if TYPE_CHECKING:
    from postbox.consumer.app import App

LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
OFFSET_RESETS = ("earliest", "latest")
_TOPIC = re.compile(r"[A-Za-z0-9._\-]{1,249}\Z")


def env_name(field_name: str) -> str:
    return "POSTBOX_" + field_name.upper()


def flag_name(field_name: str) -> str:
    return "--" + field_name.replace("_", "-")


@dataclass(frozen=True)
class ConsumerConfig:
    """How one consumer process runs. See docs/consumer.md for the reference table."""

    #: Kafka consumer group; also the namespace of the dedupe markers in Redis.
    group: str
    #: Topics to read (default: the app's, i.e. ``outbox.event.<aggregate>`` per handled aggregate).
    topics: tuple[str, ...]
    kafka_bootstrap: str = Settings.kafka_bootstrap
    redis_url: str = Settings.redis_url
    #: Most records taken from Kafka per batch; one batch = one engine.apply (split into script
    #: calls of 128 events) and one offset commit.
    batch_size: int = 500
    #: How long one poll waits to fill a batch (ms). Below the rate that fills batches, every
    #: record waits up to this long before it is applied: 5 ms keeps that out of the end-to-end
    #: latency; under load batches fill first, so throughput is unchanged (docs/tuning.md).
    batch_wait_ms: int = 5
    #: In-place retries of a raising handler before the event is dead-lettered (0 = none).
    handler_retries: int = 2
    #: A record failing transiently is dead-lettered after this many attempts (0: retried for ever).
    transient_retry_attempts: int = 0
    #: ... or once this long has passed since its first failure (None: for ever).
    transient_retry_timeout: timedelta | None = None
    #: Exponential backoff of transient failures: first delay and cap (ms); full jitter in [d/2, d].
    backoff_base_ms: int = 200
    backoff_max_ms: int = 30_000
    #: Dedupe marker lifetime: keep it above the topics' retention (default: the engine's).
    marker_ttl: timedelta = DEFAULT_MARKER_TTL
    #: Prometheus endpoint port (0 = off), served on ``metrics_host``.
    metrics_port: int = 0
    metrics_host: str = "127.0.0.1"
    log_format: str = "text"
    log_level: str = "INFO"
    #: Where postbox writes log lines: ``auto`` (its stderr handler unless the app installed
    #: handlers on the root logger), ``always`` (beside the app's), ``never`` (the app's only).
    log_stderr: str = "auto"
    #: Refuse to commit offsets unless Redis acknowledges durably (AOF fsync / WAITAOF).
    require_durable: bool = True
    #: Replicas each apply must reach before its offsets are committed (``WAIT``, or ``WAITAOF``
    #: where the server has it): a number, or ``auto`` — one when the primary has a connected
    #: replica, none without (:mod:`postbox.effects.replicas`; latency in docs/guarantees.md).
    redis_replicas: Replicas = "auto"
    #: Also read dedupe markers of the layout before the marker identity change (upgrade
    #: transition, docs/effects.md); turn off one marker TTL after upgrading.
    legacy_markers: bool = True
    #: Where a group without committed offsets starts.
    auto_offset_reset: str = "earliest"
    #: Kafka group session timeout (ms): how soon a crashed member's partitions move.
    session_timeout_ms: int = 45_000
    #: Longest time between two polls before Kafka evicts this member (ms).
    max_poll_interval_ms: int = 300_000
    #: Event schemas folder for Avro decoding (default: the app's, else ``./schemas``; see
    #: :func:`postbox.resources.schemas_dir`).
    schemas_dir: Path | None = None
    #: Kafka client id (default: ``postbox-<group>-<pid>``).
    client_id: str | None = None
    #: Static group membership (``group.instance.id``, :mod:`postbox.consumer.instance`): a
    #: restarted process with the same name gets its partitions back at once. ``none``: dynamic
    #: member. Unset: dynamic in the library; ``postbox consume`` claims a per-host default name.
    instance_id: str | None = None
    #: librdkafka properties of the consumer and its dead-letter producer (TLS, SASL...): from
    #: the settings (``POSTBOX_KAFKA_CONFIG`` file, ``-X``), see :mod:`postbox.kafka_config`.
    kafka_properties: KafkaProperties = field(default_factory=KafkaProperties)
    #: Where each value came from (``flag``, ``POSTBOX_X``, ``app``, ``default``), for logs.
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    # -- loading -----------------------------------------------------------------------------------

    @classmethod
    def load(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        app: "App | None" = None,
        settings: Settings | None = None,
        **flags: Any,
    ) -> "ConsumerConfig":
        """Flags (non-None keyword arguments) over ``POSTBOX_*`` variables over app defaults.

        ``settings`` gives the Kafka/Redis endpoints (default ``Settings.load``; the flags
        ``kafka_bootstrap`` and ``redis_url`` override them too).
        """
        env = os.environ if environ is None else environ
        names = {f.name for f in fields(cls)} - {"sources", "kafka_properties"}
        unknown = set(flags) - names
        if unknown:
            raise TypeError(f"unknown consumer setting(s): {', '.join(sorted(unknown))}")
        if settings is None:
            settings = Settings.load(
                env, kafka_bootstrap=flags.get("kafka_bootstrap"), redis_url=flags.get("redis_url")
            )
        values: dict[str, Any] = {}
        sources: dict[str, str] = {}
        for f in fields(cls):
            if f.name in ("sources", "kafka_properties"):
                continue
            raw, source = _raw_value(f.name, flags, settings, env, app)
            if raw is None:
                continue
            values[f.name] = _convert(f.name, raw, source)
            sources[f.name] = source
        for required in ("group", "topics"):
            if required not in values:
                message, fix = _MISSING[required]
                raise ConfigError(message, fix=fix)
        config = cls(**values, kafka_properties=settings.kafka_properties, sources=sources)
        config.validate()
        return config

    def validate(self) -> None:
        """Raise :class:`ConfigError` naming the setting whose value cannot be used."""
        if not self.group or not _TOPIC.match(self.group):
            self._fail("group", self.group, "a group id of letters, digits, '.', '_' or '-' (at most 249)")
        if not self.topics:
            self._fail("topics", "", "at least one topic")
        for topic in self.topics:
            refusal = _topic_refusal(topic)
            if refusal:
                self._fail("topics", topic, refusal)
        self._range("batch_size", 1, 100_000)
        self._range("batch_wait_ms", 0, 60_000)
        self._range("handler_retries", 0, 100)
        self._range("transient_retry_attempts", 0, 1_000_000)
        if self.transient_retry_timeout is not None and self.transient_retry_timeout <= timedelta(0):
            self._fail("transient_retry_timeout", self.transient_retry_timeout, "a positive duration such as 10m, 1h or 500ms")
        self._range("backoff_base_ms", 1, 3_600_000)
        self._range("backoff_max_ms", self.backoff_base_ms, 3_600_000)
        self._range("metrics_port", 0, 65535)
        self._range("session_timeout_ms", 1_000, 3_600_000)
        self._range("max_poll_interval_ms", self.session_timeout_ms, 86_400_000)
        if self.marker_ttl < timedelta(minutes=1):
            self._fail("marker_ttl", self.marker_ttl, "at least a minute (keep it above the topics' retention.ms)")
        for name, allowed, expected in _CHOICES:
            if getattr(self, name) not in allowed:
                self._fail(name, getattr(self, name), expected)
        if not _instance_id_ok(self.instance_id):
            self._fail("instance_id", self.instance_id, f"a name of letters, digits, '.', '_' or '-' (at most {instance.MAX_LENGTH}), or {instance.DYNAMIC!r}")
        if self.schemas_dir is not None and not Path(self.schemas_dir).is_dir():
            self._fail("schemas_dir", self.schemas_dir, "an existing folder of .avsc files")
        Settings(kafka_bootstrap=self.kafka_bootstrap, redis_url=self.redis_url).validate()
        self.kafka_client_configs()

    @property
    def retry_budget(self) -> RetryBudget:
        """The retry budget of a record failing transiently (:mod:`postbox.consumer.retry_budget`)."""
        return RetryBudget(self.transient_retry_attempts or None, self.transient_retry_timeout)

    def kafka_client_configs(self, client_id: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        """The librdkafka configurations of the group consumer and of the dead-letter producer;
        ConfigError when a user property collides with one postbox owns (checked at load)."""
        client_id = client_id or self.client_id or f"postbox-{self.group}"
        consumer = kafka_config.consumer_role(
            group=self.group, client_id=client_id, auto_offset_reset=self.auto_offset_reset,
            session_timeout_ms=self.session_timeout_ms, max_poll_interval_ms=self.max_poll_interval_ms,
            instance_id=self.static_instance_id,
        )  # fmt: skip
        dead_letters = kafka_config.dead_letter_producer_role(client_id=f"{client_id}-dlq", delivery_timeout_ms=15_000)
        return (kafka_config.build(self.kafka_bootstrap, self.kafka_properties, consumer),
                kafka_config.build(self.kafka_bootstrap, self.kafka_properties, dead_letters))  # fmt: skip

    @property
    def static_instance_id(self) -> str | None:
        """The ``group.instance.id`` to send, or None for a dynamic member."""
        return None if self.instance_id in (None, instance.DYNAMIC) else self.instance_id

    def with_default_instance(self, app_name: str | None = None) -> "ConsumerConfig":
        """This configuration with the per-host default instance name claimed when the instance id is
        unset or ``auto`` (``postbox consume``'s default: a restarted process gets its partitions back
        at once; :func:`postbox.consumer.instance.claim_default`). ``none`` stays a dynamic member."""
        if self.instance_id not in (None, instance.AUTO):
            return self
        claimed = instance.claim_default(self.group, app_name)
        origin = "auto" if self.instance_id == instance.AUTO else "default"
        return replace(self, instance_id=claimed, sources={**self.sources, "instance_id": f"{origin} (host, group, index)"})

    def source(self, name: str) -> str:
        """Where ``name`` was set: its flag, its variable, ``app`` or ``default``."""
        return self.sources.get(name, "default")

    def _range(self, name: str, low: int, high: int) -> None:
        value = getattr(self, name)
        if not low <= value <= high:
            self._fail(name, value, f"a whole number from {low} to {high}")

    def _fail(self, name: str, value: Any, expected: str) -> None:
        where = self.source(name)
        where = where if where not in ("default", "app") else f"{flag_name(name)} / {env_name(name)}"
        raise ConfigError(f"{where}={_shown(value)}: expected {expected}", fix=f"set {flag_name(name)} or {env_name(name)}")

    def describe(self) -> dict[str, Any]:
        """The effective values (for the start-up log line)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name == "sources":
                continue
            value = getattr(self, f.name)
            if isinstance(value, timedelta):
                value = f"{value.total_seconds():g}s"
            elif isinstance(value, (tuple, Path)):
                value = list(value) if isinstance(value, tuple) else str(value)
            elif f.name == "redis_url":
                value = redact_url(value)  # logged at start: never the password
            elif isinstance(value, KafkaProperties):
                value = value.describe()  # secrets masked
            out[f.name] = value
        return out


_MISSING = {
    "group": (
        "no consumer group: set --group or POSTBOX_GROUP (or name the app: App('billing'))",
        "e.g. postbox consume consumers.billing:app --group billing",
    ),
    "topics": (
        "no topics to read: set --topics or POSTBOX_TOPICS, or register handlers for named aggregate types",
        "e.g. --topics outbox.event.order,outbox.event.payment",
    ),
}


def _raw_value(name: str, flags: Mapping[str, Any], settings: Settings, env: Mapping[str, str], app: "App | None") -> tuple[Any, str]:
    """One field's raw value and where it came from: its flag, else (for the endpoints) the
    settings, else its variable, else the app's default; (None, "default") when none sets it."""
    if flags.get(name) is not None:
        return flags[name], flag_name(name)
    if name in ("kafka_bootstrap", "redis_url"):
        return getattr(settings, name), settings.sources.get(name, "default")
    if env.get(env_name(name)):
        return env[env_name(name)], env_name(name)
    from_app = _app_default(name, app)
    if from_app is not None:
        return from_app, "app"
    return None, "default"


def _app_default(name: str, app: "App | None") -> Any:
    """What the app itself says for a field (its name as the group, the topics of its handlers,
    its schemas folder), or None."""
    if app is None:
        return None
    if name == "group" and app.name:
        return app.name
    if name == "topics" and app.topics():
        return app.topics()
    if name == "schemas_dir":
        return app.schemas_dir
    return None


def _topic_refusal(topic: str) -> str | None:
    """What a topic to consume should have been, or None when it can be consumed."""
    if not _TOPIC.match(topic):
        return "topic names of letters, digits, '.', '_' or '-' (at most 249)"
    if topic.endswith(DLQ_SUFFIX):
        return "origin topics, not dead-letter topics (a .dlq topic is written, never consumed here)"
    return None


def _instance_id_ok(value: str | None) -> bool:
    """Unset, ``none`` (a dynamic member) or a name the broker takes as ``group.instance.id``."""
    return value is None or value == instance.DYNAMIC or instance.is_valid(value)


#: Settings with a fixed set of values, in the order they are checked: (field, allowed, expected).
_CHOICES = (
    ("log_format", LOG_FORMATS, " or ".join(LOG_FORMATS)),
    ("log_level", LOG_LEVELS, ", ".join(LOG_LEVELS)),
    ("log_stderr", LOG_STDERR, ", ".join(LOG_STDERR)),
    ("auto_offset_reset", OFFSET_RESETS, " or ".join(OFFSET_RESETS)),
)

_INTS = frozenset({"batch_size", "batch_wait_ms", "handler_retries", "transient_retry_attempts", "backoff_base_ms", "backoff_max_ms",
                   "metrics_port", "session_timeout_ms", "max_poll_interval_ms"})  # fmt: skip

#: What a field's value should look like, for the error on one that does not convert (default: a whole number).
_EXPECTED = {
    "marker_ttl": "a duration such as 691200, 8d, 36h or 90m",
    "transient_retry_timeout": "a duration such as 10m, 1h, 30s or 500ms",
    "require_durable": "true or false",
    "legacy_markers": "true or false",
    "redis_replicas": f"auto or a number of replicas from 0 to {replicas.MAX_REPLICAS}",
    "topics": "comma-separated topic names",
}


def _convert(name: str, raw: Any, source: str) -> Any:
    """Turn a flag or variable value into the field's type; ConfigError names ``source``."""
    try:
        return _parse(name, raw)
    except ValueError as exc:
        expected = _EXPECTED.get(name, "a whole number")
        raise ConfigError(
            f"{source}={_shown(raw)}: expected {expected} ({exc})", fix=f"set {flag_name(name)} or {env_name(name)}"
        ) from None


def _parse(name: str, raw: Any) -> Any:
    """The field's value from a flag or variable; ValueError says what could not be read."""
    if name == "topics":
        return _parse_topics(raw)
    if name in _INTS:
        return _parse_int(raw)
    if name in ("marker_ttl", "transient_retry_timeout"):
        return parse_duration(raw)
    if name in ("require_durable", "legacy_markers"):
        return parse_bool(raw)
    if name == "redis_replicas":
        return replicas.parse(raw)
    if name == "schemas_dir":
        return Path(raw).expanduser()
    if name in ("log_format", "log_stderr", "auto_offset_reset"):
        return str(raw).strip().lower()
    if name == "log_level":
        return str(raw).strip().upper()
    return str(raw).strip()


def _parse_topics(raw: Any) -> tuple[str, ...]:
    """Comma-separated names (or a sequence of them), blanks and repeats dropped, order kept."""
    items = raw.split(",") if isinstance(raw, str) else list(raw)
    topics = tuple(dict.fromkeys(t.strip() for t in items if t and t.strip()))
    if not topics:
        raise ValueError("no topic names")
    return topics


def _parse_int(raw: Any) -> int:
    """A whole number, given as one or as text (``_`` separators allowed); a bool is refused."""
    if isinstance(raw, bool):
        raise ValueError("not a number")
    if isinstance(raw, int):
        return raw
    text = str(raw).strip().replace("_", "")
    if not re.fullmatch(r"-?\d+", text):
        raise ValueError("not a whole number")
    return int(text)


def _shown(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 200 else text[:197] + "..."


def parse_duration(raw: Any) -> timedelta:
    """``691200`` (seconds), ``8d``, ``36h``, ``90m``, ``30s``, ``500ms`` or a timedelta."""
    if isinstance(raw, timedelta):
        return raw
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        return timedelta(seconds=raw)
    try:
        return _parse_duration_text(str(raw))
    except ValueError:
        raise ValueError(f"cannot read {raw!r} as a duration") from None


def parse_bool(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"cannot read {raw!r} as true/false")
