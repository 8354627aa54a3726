"""One handle on a Kafka cluster for what inspects it: topics, offsets, retention, consumer groups.

Used by the incident commands, `postbox exporter`, the demo and the benchmarks, so it lives beside
the other client modules rather than in ``incident/``.

Built on confluent-kafka's AdminClient (metadata, configs, list_offsets, consumer groups) and a
Consumer that is only ever *assigned* partitions: it never joins a group and never commits, so
reading a topic during an incident changes nothing on the cluster. librdkafka's own log lines are
silenced (a stopped broker must give one readable error, not a screen of connection retries).
"""

from __future__ import annotations

import difflib
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource, OffsetSpec, ResourceType

from postbox import kafka_config
from postbox.errors import ConfigError, KafkaUnavailableError, PostboxError, UnknownGroupError, UnknownTopicError
from postbox.kafka_config import KafkaProperties, LoginErrors
from postbox.topics import DLQ_SUFFIX
from postbox.topics import TOPIC_PREFIX

#: Seconds to wait for any one broker answer (POSTBOX_KAFKA_TIMEOUT overrides).
DEFAULT_TIMEOUT = 5.0
#: Consumer group ids this tool uses for its own assigned-only consumers (never committed).
CLI_GROUP_PREFIX = "postbox-cli-"
#: Offset value librdkafka uses for "no committed offset".
NO_OFFSET = -1001


_GRANT = "kafka-acls --bootstrap-server ... --add --allow-principal User:<this client's principal> --operation {operation}"
_OTHER_PRINCIPAL = ", or run with the client properties of a principal that has it (-X / POSTBOX_KAFKA_CONFIG)"

#: The expected admin errors of a request about a consumer group, each as (error class, what
#: happened, the fix) with ``{group}``, ``{bootstrap}``, ``{action}`` and ``{operation}`` (the ACL
#: operation the request needs) filled in: one table, so every command that looks at a group (lag,
#: replay, trace, doctor, the exporter) or resets its offsets (replay --execute) says the same. A group that does
#: not exist (GROUP_ID_NOT_FOUND) is not here: it is an empty group, not an error.
GROUP_ADMIN_ERRORS: dict[int, tuple[type[PostboxError], str, str]] = {
    KafkaError.GROUP_AUTHORIZATION_FAILED: (
        ConfigError, "Kafka at {bootstrap} refused to {action} consumer group {group}: not authorized",
        f"grant it: {_GRANT} --group {{group}}{_OTHER_PRINCIPAL}"),
    KafkaError.TOPIC_AUTHORIZATION_FAILED: (
        ConfigError, "Kafka at {bootstrap} refused to {action} the topics of consumer group {group}: not authorized",
        f"grant it on the group's topics: {_GRANT} --topic <topic>{_OTHER_PRINCIPAL}"),
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: (
        ConfigError, "Kafka at {bootstrap} refused to describe the cluster while asking about consumer group {group}: not authorized",
        f"grant it: {_GRANT.replace('{operation}', 'Describe')} --cluster{_OTHER_PRINCIPAL}"),
    KafkaError.COORDINATOR_NOT_AVAILABLE: (
        KafkaUnavailableError, "the coordinator of consumer group {group} is not available at {bootstrap}",
        "the broker is starting, or a partition of __consumer_offsets has no leader: retry in a few seconds; "
        "if it persists, check the brokers (`postbox status`, their logs) and __consumer_offsets' replicas"),
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS: (
        KafkaUnavailableError, "the coordinator of consumer group {group} is still loading the group's offsets",
        "retry in a few seconds (a broker just started or took over a partition of __consumer_offsets)"),
    KafkaError.NOT_COORDINATOR: (
        KafkaUnavailableError, "the broker asked is no longer the coordinator of consumer group {group} (leadership moved)",
        "retry: the next request finds the new coordinator"),
}  # fmt: skip


def group_admin_error(group: str, bootstrap: str, error: Any, *, action: str = "describe",
                      operation: str = "Describe") -> PostboxError | None:  # fmt: skip
    """The one-line error (with its fix) for an expected admin error about ``group``, else None.
    ``action`` says what was asked (``describe``, ``reset the offsets of``) and ``operation`` the
    ACL operation it needs (Describe; Read to commit offsets)."""
    if not isinstance(error, KafkaError):
        return None
    found = GROUP_ADMIN_ERRORS.get(error.code())
    if found is None:
        return None
    kind, message, fix = found
    return kind(message.format(group=group, bootstrap=bootstrap, action=action), fix=fix.format(group=group, operation=operation))


#: The codes with which the broker or librdkafka says a topic (or partition) is not there. (A
#: scan hears nothing of an assigned topic deleted meanwhile: :meth:`Kafka._gone` asks the metadata.)
_GONE = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION})


def _unknown_topic(exc: KafkaException) -> bool:
    """Whether ``exc`` is the broker saying the topic (or partition) is not there."""
    error = exc.args[0] if exc.args else None
    return isinstance(error, KafkaError) and error.code() in _GONE


def kafka_timeout() -> float:
    raw = os.environ.get("POSTBOX_KAFKA_TIMEOUT")
    try:
        return float(raw) if raw else DEFAULT_TIMEOUT
    except ValueError:
        return DEFAULT_TIMEOUT


def _quiet_logger() -> logging.Logger:
    logger = logging.getLogger("postbox.kafka.client")
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())
    logger.propagate = False
    return logger


def client_config(
    bootstrap: str,
    role: kafka_config.Role,
    properties: KafkaProperties | None = None,
    errors: LoginErrors | None = None,
) -> dict[str, Any]:
    """A client of the incident commands: the role's configuration (with the user's properties,
    see :mod:`postbox.kafka_config`), quiet logs, errors collected instead of printed."""
    quick = kafka_config.Role(role.name, {"socket.connection.setup.timeout.ms": 5000, **role.defaults}, role.owned)
    return kafka_config.build(
        bootstrap, properties or KafkaProperties(), quick,
        logger=_quiet_logger(), error_cb=errors if errors is not None else (lambda err: None),
    )  # fmt: skip


@dataclass(frozen=True)
class PartitionOffsets:
    partition: int
    low: int
    high: int
    leader: int | None = None

    @property
    def messages(self) -> int:
        """Records between the low and high watermark (exact unless compaction or transactions)."""
        return max(0, self.high - self.low)


@dataclass
class TopicInfo:
    name: str
    partitions: list[PartitionOffsets]
    retention_ms: int | None = None
    cleanup_policy: str | None = None

    @property
    def messages(self) -> int:
        return sum(p.messages for p in self.partitions)

    @property
    def kind(self) -> str:
        if self.name.endswith(DLQ_SUFFIX):
            return "dlq"
        if self.name.startswith(TOPIC_PREFIX):
            return "outbox"
        return "other"

    def as_dict(self) -> dict[str, Any]:
        return {
            "topic": self.name,
            "kind": self.kind,
            "partitions": [
                {"partition": p.partition, "earliest": p.low, "latest": p.high, "messages": p.messages, "leader": p.leader}
                for p in self.partitions
            ],
            "messages": self.messages,
            "retention_ms": self.retention_ms,
            "cleanup_policy": self.cleanup_policy,
        }


@dataclass
class GroupMember:
    member_id: str
    client_id: str
    host: str
    assignments: list[tuple[str, int]] = field(default_factory=list)
    #: The static member's ``group.instance.id`` (None for a dynamic member).
    instance_id: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"member_id": self.member_id, "client_id": self.client_id, "host": self.host, "instance_id": self.instance_id,
                "partitions": [{"topic": t, "partition": p} for t, p in sorted(self.assignments)]}


@dataclass
class GroupInfo:
    group: str
    state: str
    members: list[GroupMember]

    @property
    def active(self) -> bool:
        return bool(self.members)


class Kafka:
    """One cluster connection (admin + an assign-only consumer), opened lazily, closed by close()."""

    def __init__(self, bootstrap: str, timeout: float | None = None, properties: KafkaProperties | None = None) -> None:
        self.bootstrap = bootstrap
        self.properties = properties or KafkaProperties()
        #: Login/TLS failures librdkafka reported: a timeout after one is a configuration error.
        self.login_errors = LoginErrors()
        self.timeout = kafka_timeout() if timeout is None else timeout
        self._admin: AdminClient | None = None
        self._consumer: Consumer | None = None
        self._metadata: Any = None

    # -- plumbing -----------------------------------------------------------------------------------
    @property
    def admin(self) -> AdminClient:
        if self._admin is None:
            self._admin = kafka_config.open_client(AdminClient, self.client_config(kafka_config.admin_role()), self.properties)
        return self._admin

    def consumer(self) -> Consumer:
        """The assign-only reading consumer (no group membership, no commits)."""
        if self._consumer is None:
            self._consumer = self.new_reader()
        return self._consumer

    def client_config(self, role: kafka_config.Role) -> dict[str, Any]:
        """The configuration of one client of ``role`` on this cluster."""
        return client_config(self.bootstrap, role, self.properties, self.login_errors)

    def new_reader(self) -> Consumer:
        """A fresh assign-only reader (see :func:`new_reader`) with this cluster's properties."""
        return new_reader(self.bootstrap, self.properties, self.login_errors)

    def close(self) -> None:
        if self._consumer is not None:
            try:
                self._consumer.close()
            except Exception:  # closing must never hide the real outcome
                pass
            self._consumer = None

    def __enter__(self) -> "Kafka":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def unavailable(self, exc: BaseException | str) -> PostboxError:
        """The error for a broker that did not answer: a ConfigError naming the listener and the
        login mechanism when librdkafka saw the login (or TLS handshake) fail, else unreachable."""
        if self._admin is not None:
            self._admin.poll(0)  # librdkafka hands errors to error_cb only when the client is polled
        login = self.login_errors.error(self.bootstrap, self.properties)
        if login is not None:
            return login
        detail = exc.args[0] if isinstance(exc, KafkaException) and exc.args else exc
        text = self.properties.scrub(detail.str() if isinstance(detail, KafkaError) else str(detail))
        return KafkaUnavailableError(
            f"Kafka at {self.bootstrap} did not answer within {self.timeout:g} s ({text})",
            fix="start it with `postbox up`, or point POSTBOX_KAFKA_BOOTSTRAP / --kafka-bootstrap at a reachable broker"
            + ("" if "security.protocol" in self.properties.values else
               "; a TLS or SASL listener needs its client properties (POSTBOX_KAFKA_CONFIG / -X security.protocol=...)"),
        )

    def _result(self, future: Any, group: str | None = None) -> Any:
        """The future's result; a broker that did not answer is :meth:`unavailable`, and the
        expected errors of a request about ``group`` are :data:`GROUP_ADMIN_ERRORS`."""
        try:
            return future.result(timeout=self.timeout + 1)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            mapped = group_admin_error(group, self.bootstrap, error) if group is not None else None
            if mapped is not None:
                raise mapped from None
            if isinstance(error, KafkaError) and error.code() in (
                KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN,
                KafkaError.REQUEST_TIMED_OUT, KafkaError.COORDINATOR_NOT_AVAILABLE,
            ):
                raise self.unavailable(exc) from None
            raise
        except TimeoutError:
            raise self.unavailable("request timed out") from None
        except Exception as exc:
            if type(exc).__name__ == "TimeoutError":
                raise self.unavailable("request timed out") from None
            raise

    # -- metadata -----------------------------------------------------------------------------------
    def metadata(self, refresh: bool = False) -> Any:
        if self._metadata is None or refresh:
            self._metadata = self._list_topics()
        return self._metadata

    def _list_topics(self) -> Any:
        """Cluster metadata: first asked for one second, so that a refused login (which librdkafka
        reports within a second, then retries forever) ends the wait at once; then, if nothing
        was refused, for the rest of the timeout in one request (a slow broker still answers)."""
        deadline = time.monotonic() + self.timeout
        step = min(1.0, self.timeout)
        while True:
            try:
                return self.admin.list_topics(timeout=step)
            except KafkaException as exc:
                self.admin.poll(0)
                step = deadline - time.monotonic()
                if self.login_errors.last is not None or step < 0.1:
                    raise self.unavailable(exc) from None

    def ping(self) -> int:
        """Number of brokers that answered; KafkaUnavailableError when none did."""
        return len(self.metadata(refresh=True).brokers)

    def topic_names(self) -> list[str]:
        return sorted(t for t in self.metadata().topics if not t.startswith("__"))

    def require_topic(self, topic: str) -> Any:
        """The topic's metadata; UnknownTopicError (with near names) when it does not exist."""
        md = self.metadata()
        meta = md.topics.get(topic)
        if meta is None or (meta.error is not None and meta.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
            names = self.topic_names()
            near = difflib.get_close_matches(topic, names, n=3, cutoff=0.6)
            hint = f"did you mean {', '.join(near)}?" if near else "`postbox topics` lists the topics"
            raise UnknownTopicError(f"topic {topic!r} does not exist on {self.bootstrap}", fix=hint)
        return meta

    def partitions(self, topic: str) -> list[int]:
        return sorted(self.require_topic(topic).partitions)

    def topic_exists(self, topic: str) -> bool:
        return topic in self.metadata().topics

    # -- offsets ------------------------------------------------------------------------------------
    def list_offsets(
        self, partitions: Iterable[TopicPartition], spec: Callable[[], OffsetSpec], *, vanished: set[str] | None = None,
    ) -> dict[tuple[str, int], int]:
        """The offset ``spec`` gives for each partition. A topic deleted since the metadata was
        read raises :class:`UnknownTopicError`; with ``vanished``, it is added there and left out
        instead (a listing over every topic must not fail because one went away meanwhile)."""
        request = {TopicPartition(tp.topic, tp.partition): spec() for tp in partitions}
        if not request:
            return {}
        try:
            futures = self.admin.list_offsets(request, request_timeout=self.timeout)
        except KafkaException as exc:
            raise self.unavailable(exc) from None
        out: dict[tuple[str, int], int] = {}
        for tp, future in futures.items():
            try:
                info = self._result(future)
            except KafkaException as exc:
                if not _unknown_topic(exc):
                    raise
                self._metadata = None  # it told of a topic that is gone
                if vanished is None:
                    raise self._deleted(tp.topic) from None
                vanished.add(tp.topic)
                continue
            out[(tp.topic, tp.partition)] = info.offset
        return out

    def _deleted(self, topic: str) -> UnknownTopicError:
        return UnknownTopicError(f"topic {topic!r} (or the partition asked for) does not exist on {self.bootstrap} any more",
                                 fix="`postbox topics` lists the topics")

    def watermarks(self, topic: str, partitions: Iterable[int] | None = None) -> dict[int, tuple[int, int]]:
        """{partition: (earliest, end)}; :class:`UnknownTopicError` when the topic is not there."""
        parts = list(self.partitions(topic) if partitions is None else partitions)
        tps = [TopicPartition(topic, p) for p in parts]
        low = self.list_offsets(tps, OffsetSpec.earliest)
        high = self.list_offsets(tps, OffsetSpec.latest)
        return {p: (low[(topic, p)], high[(topic, p)]) for p in parts}

    def read_ranges(
        self, topics: Iterable[str], *, since_ms: int | None = None, until_ms: int | None = None,
    ) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], int]]:
        """(starts, ends) for :meth:`scan` over every partition of ``topics``: from the first record
        at or after ``since_ms`` (else the earliest) up to the first at or after ``until_ms`` (else
        the end). A topic deleted since it was listed is left out, whichever request finds it gone:
        the commands that go through every topic (`trace`, `dlq list`) read the ones still there."""
        starts: dict[tuple[str, int], int] = {}
        ends: dict[tuple[str, int], int] = {}
        for topic in topics:
            try:
                marks = self.watermarks(topic)
                from_time = self.offsets_for_time(topic, list(marks), since_ms) if since_ms is not None else {}
                to_time = self.offsets_for_time(topic, list(marks), until_ms) if until_ms is not None else {}
            except UnknownTopicError:
                continue
            for p, (low, high) in marks.items():
                starts[(topic, p)] = max(low, from_time.get(p, low))
                ends[(topic, p)] = min(high, to_time.get(p, high))
        return starts, ends

    def offsets_for_time(self, topic: str, partitions: Iterable[int], timestamp_ms: int) -> dict[int, int]:
        """The first offset at or after ``timestamp_ms`` per partition (the high watermark when none)."""
        parts = list(partitions)
        # Negative timestamps are ListOffsets' special values (-1 latest, -2 earliest, others refused
        # as "invalid offset"); a time before 1970 means the first record, as 0 does.
        timestamp_ms = max(0, timestamp_ms)
        found = self.list_offsets([TopicPartition(topic, p) for p in parts], lambda: OffsetSpec.for_timestamp(timestamp_ms))
        marks = None
        out: dict[int, int] = {}
        for p in parts:
            offset = found[(topic, p)]
            if offset < 0:
                marks = marks or self.watermarks(topic, parts)
                offset = marks[p][1]
            out[p] = offset
        return out

    def describe_topics(self, names: list[str]) -> list[TopicInfo]:
        """Each listed topic's partitions, offsets and retention; one deleted since it was listed
        is left out."""
        md = self.metadata()
        tps = [TopicPartition(n, p) for n in names for p in sorted(md.topics[n].partitions)]
        gone: set[str] = set()
        low = self.list_offsets(tps, OffsetSpec.earliest, vanished=gone)
        high = self.list_offsets(tps, OffsetSpec.latest, vanished=gone)
        names = [n for n in names if n not in gone]
        configs = self.topic_configs(names)
        infos = []
        for name in names:
            meta = md.topics[name]
            parts = [
                PartitionOffsets(p, low[(name, p)], high[(name, p)], meta.partitions[p].leader)
                for p in sorted(meta.partitions)
            ]
            cfg = configs.get(name, {})
            retention = cfg.get("retention.ms")
            infos.append(TopicInfo(
                name, parts,
                retention_ms=int(retention) if retention not in (None, "") else None,
                cleanup_policy=cfg.get("cleanup.policy"),
            ))
        return infos

    def topic_configs(self, names: list[str]) -> dict[str, dict[str, str]]:
        if not names:
            return {}
        resources = [ConfigResource(ResourceType.TOPIC, n) for n in names]
        try:
            futures = self.admin.describe_configs(resources, request_timeout=self.timeout)
        except KafkaException as exc:
            raise self.unavailable(exc) from None
        out: dict[str, dict[str, str]] = {}
        for resource, future in futures.items():
            try:
                entries = self._result(future)
            except KafkaException:
                continue
            out[resource.name] = {k: v.value for k, v in entries.items()}
        return out

    # -- consumer groups ----------------------------------------------------------------------------
    def group_ids(self) -> list[str]:
        """Every consumer group but the CLI's own. A listing that any broker failed to answer is an
        error, never the partial list: a group left out would read as a group that does not exist."""
        try:
            future = self.admin.list_consumer_groups(request_timeout=self.timeout)
        except KafkaException as exc:
            raise self.unavailable(exc) from None
        result = self._result(future)
        if result.errors:
            raise self._listing_failed(result.errors[0])
        return sorted(g.group_id for g in result.valid if not g.group_id.startswith(CLI_GROUP_PREFIX))

    def _listing_failed(self, failure: Any) -> PostboxError:
        """The error for a consumer-group listing that came back with errors (a broker that did not
        answer, a refused cluster Describe), with the fix."""
        error = failure.args[0] if isinstance(failure, KafkaException) and failure.args else failure
        if isinstance(error, KafkaError) and error.code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED:
            return ConfigError(
                f"listing the consumer groups on Kafka at {self.bootstrap} is not authorized",
                fix="grant this principal Describe on the cluster (kafka-acls --add --operation Describe --cluster), or name the groups (--group)",
            )
        return self.unavailable(KafkaException(error) if isinstance(error, KafkaError) else error)

    def committed(self, group: str) -> dict[tuple[str, int], int]:
        """The group's committed offsets {(topic, partition): offset} (no entry where none is committed)."""
        try:
            futures = self.admin.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group)], request_timeout=self.timeout
            )
        except KafkaException as exc:
            raise self.unavailable(exc) from None
        result = self._result(futures[group], group)
        return {
            (tp.topic, tp.partition): tp.offset
            for tp in (result.topic_partitions or [])
            if tp.offset >= 0 and tp.error is None
        }

    def describe_group(self, group: str) -> GroupInfo:
        try:
            futures = self.admin.describe_consumer_groups([group], request_timeout=self.timeout)
        except KafkaException as exc:
            raise self.unavailable(exc) from None
        try:
            desc = self._result(futures[group], group)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if isinstance(error, KafkaError) and error.code() == KafkaError.GROUP_ID_NOT_FOUND:
                return GroupInfo(group, "DEAD", [])
            raise
        members = []
        for m in desc.members or []:
            assigned = []
            if m.assignment is not None:
                assigned = [(tp.topic, tp.partition) for tp in m.assignment.topic_partitions]
            members.append(GroupMember(m.member_id, m.client_id, m.host, assigned, getattr(m, "group_instance_id", None)))
        state = getattr(desc.state, "name", str(desc.state))
        return GroupInfo(group, state, members)

    def require_group(self, group: str) -> tuple[GroupInfo, dict[tuple[str, int], int]]:
        info = self.describe_group(group)
        committed = self.committed(group)
        if not committed and not info.members:
            groups = self.group_ids()
            near = difflib.get_close_matches(group, groups, n=3, cutoff=0.6)
            hint = f"did you mean {', '.join(near)}?" if near else "`postbox lag` lists the groups"
            raise UnknownGroupError(f"consumer group {group!r} has no members and no committed offsets", fix=hint)
        return info, committed

    def groups_on_topic(self, topic: str, limit: int = 500) -> dict[str, dict[int, int]]:
        """{group: {partition: committed offset}} for every group with commits on ``topic``."""
        out: dict[str, dict[int, int]] = {}
        for group in self.group_ids()[:limit]:
            offsets = {p: o for (t, p), o in self.committed(group).items() if t == topic}
            if offsets:
                out[group] = offsets
        return out

    # -- reading ------------------------------------------------------------------------------------
    def read_one(self, topic: str, partition: int, offset: int) -> Message | None:
        """The record at (or first after) ``offset``, or None when there is none yet."""
        found = self.read_first({(topic, partition): offset})
        return found.get((topic, partition))

    def read_first(self, positions: dict[tuple[str, int], int]) -> dict[tuple[str, int], Message]:
        """One record per (topic, partition) at the given offsets (those that have one)."""
        if not positions:
            return {}
        consumer = self.new_reader()
        out: dict[tuple[str, int], Message] = {}
        try:
            consumer.assign([TopicPartition(t, p, o) for (t, p), o in positions.items()])
            pending = set(positions)
            deadline = time.monotonic() + self.timeout + 2
            while pending and time.monotonic() < deadline:
                # one record or partition-end event per pending partition: consume() returns as
                # soon as it has them rather than after its timeout
                for msg in consumer.consume(num_messages=len(pending), timeout=0.5):
                    where = (msg.topic(), msg.partition())
                    if msg.error():
                        if msg.error().code() == KafkaError._PARTITION_EOF:
                            pending.discard(where)
                        continue
                    if where in pending:
                        out[where] = msg
                        pending.discard(where)
                        consumer.incremental_unassign([TopicPartition(*where)])
        finally:
            consumer.close()
        return out

    def scan(
        self,
        starts: dict[tuple[str, int], int],
        ends: dict[tuple[str, int], int],
        *,
        max_records: int,
        progress: Callable[[int, int], None] | None = None,
        stop: Callable[[], bool] | None = None,
    ) -> Iterator[Message]:
        """Every record from ``starts`` up to (excluding) ``ends`` per partition, at most ``max_records``.

        Yields records as they arrive (partitions interleave); ``progress(scanned, total)`` is
        called now and then; ``stop()`` ends the scan early.
        """
        todo = {tp: (starts[tp], ends[tp]) for tp in starts if ends.get(tp, 0) > starts[tp]}
        if not todo:
            return
        total = min(max_records, sum(e - s for s, e in todo.values()))
        consumer = self.new_reader()
        scanned = 0
        idle_deadline = time.monotonic() + self.timeout + 5
        next_check = time.monotonic() + 1.0
        try:
            consumer.assign([TopicPartition(t, p, s) for (t, p), (s, _) in todo.items()])
            pending = set(todo)
            while pending and scanned < max_records:
                if stop is not None and stop():
                    break
                # consume() returns once it has num_messages or after the timeout: asking for no
                # more than the records left ends a small scan as soon as they are in, instead of
                # 0.5 s after (every `tail`, `trace`, `dlq` read). A partition is done when its
                # range's last offset is read (its end-of-partition event comes a fetch later); a
                # range with gaps (transaction markers, compaction) waits out the timeout, as before.
                batch = consumer.consume(num_messages=max(1, min(1000, total - scanned)), timeout=0.5)
                if not batch:
                    next_check = self._scan_idle(pending, next_check, idle_deadline)
                    continue
                idle_deadline = time.monotonic() + self.timeout + 5
                wanted, finished = self._in_range(batch, todo, pending)
                for msg in wanted:
                    scanned += 1
                    yield msg
                    if scanned >= max_records:
                        break
                _release(consumer, finished, pending)
                if progress is not None:
                    progress(scanned, total)
        finally:
            consumer.close()

    def _scan_idle(self, pending: set[tuple[str, int]], next_check: float, idle_deadline: float) -> float:
        """After an empty batch: drops partitions whose topic is gone (once a second), raises past the
        idle deadline; returns when to look at the metadata next."""
        now = time.monotonic()
        if now > next_check:  # librdkafka says nothing of an assigned topic deleted meanwhile
            pending -= self._gone(pending)
            return now + 1.0
        if now > idle_deadline:
            raise self.unavailable("no records arrived while reading")
        return next_check

    def _gone(self, partitions: set[tuple[str, int]]) -> set[tuple[str, int]]:
        """The ones of ``partitions`` whose topic (or partition) is no longer in the cluster's metadata."""
        topics = self.metadata(refresh=True).topics
        return {(t, p) for t, p in partitions if t not in topics or p not in topics[t].partitions}

    def _in_range(
        self, batch: list[Message], todo: dict[tuple[str, int], tuple[int, int]], pending: set[tuple[str, int]]
    ) -> tuple[list[Message], list[tuple[str, int]]]:
        """One consumed batch of a scan: its records inside the scanned range (in order), and the
        partitions it finished (end of partition, or the range's last offset reached)."""
        wanted: list[Message] = []
        finished: list[tuple[str, int]] = []
        for msg in batch:
            where = (msg.topic(), msg.partition())
            error = msg.error()
            if error:
                if error.code() == KafkaError._PARTITION_EOF:
                    finished.append(where)
                elif error.code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN):
                    raise self.unavailable(error.str())
                continue
            if where not in pending:
                continue
            end = todo[where][1]
            if msg.offset() < end:
                wanted.append(msg)
            if msg.offset() >= end - 1:
                finished.append(where)
        return wanted, finished

    # -- writing ------------------------------------------------------------------------------------
    def producer(self) -> Producer:
        """acks=all, idempotent, and the Java client's partitioner: same key → same partition."""
        role = kafka_config.writer_role(message_timeout_ms=int(max(self.timeout, 5) * 1000 * 2))
        return kafka_config.open_client(Producer, self.client_config(role), self.properties)


def new_reader(bootstrap: str, properties: KafkaProperties | None = None, errors: LoginErrors | None = None) -> Consumer:
    """A consumer for assign()-only reading: a throwaway group id, no commits, EOF events on."""
    role = kafka_config.reader_role(group=f"{CLI_GROUP_PREFIX}{uuid.uuid4().hex[:12]}")
    props = properties or KafkaProperties()
    return kafka_config.open_client(Consumer, client_config(bootstrap, role, props, errors), props)


def _release(consumer: Consumer, finished: list[tuple[str, int]], pending: set[tuple[str, int]]) -> None:
    """Unassigns the partitions of a scan whose range is read, so the fetcher stops on them."""
    for where in finished:
        if where in pending:
            pending.discard(where)
            consumer.incremental_unassign([TopicPartition(*where)])
