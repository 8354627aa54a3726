"""The effects engine: apply events' effects to Redis exactly once per consumer group, all or nothing.

::

    engine = EffectsEngine(redis.Redis.from_url(settings.redis_url), group="billing")
    results = engine.apply([(event_ref(event), fx), ...])  # one ApplyResult per event, in order
    for r in results:
        if r.failed: dead_letter(r)                      # permanent: already undone in Redis
    if engine.durability().durable: commit_offsets()

How one call works: the engine packs up to ``batch_size`` events into one EVALSHA of
``lua/apply_effects.lua`` (values as ARGV; each distinct shape of an event's commands sent once
per call, then per event only its shape's number, its id, its keys and its values — the layout is
documented in the script's header). For each event the script claims the dedupe marker of
(group, event) with ``SET NX PX`` — its key comes from the group and the
:class:`~postbox.effects.keys.EventRef` (id and routing tag), never from the effects; during the
upgrade transition the legacy marker is checked first — a duplicate changes nothing; otherwise it
runs the event's commands with ``redis.pcall``, and on the first error undoes what the event
changed, its marker included, records the failure in the failure stream and reports it as a
normal reply.
Each event is atomic on its own (Redis runs a script to the end without interleaving anything);
a later event of the same call does not depend on an earlier one succeeding.

Refused calls are error replies and nothing ran: OOM (maxmemory + noeviction: the script's
flags leave out ``allow-oom``, so Redis refuses it before its first line), BUSY, LOADING, READONLY,
TRYAGAIN, CLUSTERDOWN, connection errors. Those raise :class:`TransientEffectError` (or, with
``apply(..., partial=True)``, come back as ``RETRY`` results for the events they held back);
retrying is safe because events whose call did run come back as duplicates.

Calls go out one at a time per hash-slot lane, so the events of one aggregate are applied in
order even when a call must be retried (NOSCRIPT, MOVED). On Redis Cluster the events are grouped
by the slot of their routing tag (every key of an event, its marker and failure stream included,
must be in that slot — see :mod:`postbox.effects.keys`; with ``strict_slots`` an effect key
outside it fails the event before sending, naming the keys, their slots and the slot expected),
the calls of one round that go to the same node (different slots, so no order between them)
are pipelined, and each node's calls run in their own thread, in parallel with the other nodes'
(:mod:`postbox.effects.nodes`): a master that is down or stopped holds back only the events whose
slots live on it, and Redis-bound work overlaps across masters (client-bound work does not: see
bench/cluster.py).
"""

from __future__ import annotations

import concurrent.futures
import enum
import logging
import operator
import threading
import time
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, NamedTuple, NoReturn

import redis
from redis.exceptions import (
    AskError,
    ClusterCrossSlotError,
    MovedError,
    NoScriptError,
    ResponseError,
)

from postbox.frozen import assemble
from postbox.effects import eviction, groups, server_watch
from postbox.effects.builder import Effects
from postbox.effects.durability import Durability, check_durability, wait_for
from postbox.effects.replicas import Replicas, Wait
from postbox.effects.keys import EventRef, KeyLayout, ReplayRef, describe_slots, key_slot, legacy_anchor, tag_text
from postbox.effects.verdicts import Verdict, handler_verdict, is_verdict, parse_verdict
from postbox.effects.nodes import NodeHealth, Placement, plan_waves
from postbox.effects.redis_errors import CLUSTER_UNSETTLED, transient_reason
from postbox.effects.script import ApplyScript, build_script, default_functions_dir
from postbox.effects.wire import Command, round_trip
from postbox.redis_client import login_error
from postbox.errors import (
    CrossSlotEffectError,
    EffectConfigError,
    EffectEngineError,
    InvalidEffectError,
    PermanentEffectError,
    TransientEffectError,
)

log = logging.getLogger("postbox.effects")

#: How often the slot map is read again while a cluster node is down (a failover may have moved its slots).
FAILOVER_CHECK_S = 0.5
#: Marker TTL: Kafka's default retention (7 days) plus a day of margin. A redelivery older than
#: the marker would apply again, so keep this above the topics' ``retention.ms``.
DEFAULT_MARKER_TTL = timedelta(days=8)
#: Events per script call: enough for one call per runtime batch (500 records by default). With
#: ``appendfsync always`` Redis fsyncs once per event-loop pass that wrote, so each call of a
#: batch paid its own fsync (~1.6 ms on the bench's disk) when 128 split a batch into four calls:
#: engine alone, 500-event batches, one HINCRBY each, medians of 5 paired runs at load ~4: 128 →
#: 7.4k/s, 512 → 10.3k/s (1.38x). Redis time per call is bounded by this, MAX_CALL_ARGS and
#: MAX_CALL_BYTES: ~5 µs of Lua per one-command event since protocol 3, so ~2.5 ms of CPU for a
#: full call, then its fsync; a call cut smaller would cost one more fsync (~1.6 ms), which
#: blocks Redis just the same.
DEFAULT_BATCH_SIZE = 512
#: Upper bounds of one call besides the event count, so big effects do not make long calls.
MAX_CALL_ARGS = 20_000
MAX_CALL_BYTES = 4 * 1024 * 1024
DEFAULT_FAILURES_MAXLEN = 10_000
_PROTOCOL = b"4"
#: The error text of a script stopped by SCRIPT KILL (Redis kills only scripts that wrote nothing).
_SCRIPT_KILLED = "Script killed by user"
_ATTEMPTS = 3


class Outcome(str, enum.Enum):
    APPLIED = "applied"
    DUPLICATE = "duplicate"
    FAILED = "failed"
    #: Not applied now for a transient reason (only with ``apply(..., partial=True)``): apply it again later.
    RETRY = "retry"


@dataclass(frozen=True)
class ApplyResult:
    """What happened to one event.

    - ``APPLIED``: every effect and the dedupe marker are written.
    - ``DUPLICATE``: the marker was there; nothing changed.
    - ``FAILED``: nothing of the event stayed (undone in the script, or never sent); ``error_class``
      is ``"permanent"``: dead-letter it and move on. ``command_index`` (0-based, into
      ``effects.commands``), ``op`` and ``command`` name the failing command when there is one
      (``None`` when the event was refused before sending, e.g. mixed slots), ``error`` is Redis's
      text (``WRONGTYPE ...``). ``undo_error`` set means the undo itself failed: a bug, the keys
      may be partial — :meth:`raise_for_failure` raises :class:`EffectEngineError` for it.
    - ``RETRY`` (``apply(..., partial=True)`` only): not known applied, for a transient reason
      (``reason``: its node unreachable or down, CLUSTERDOWN, an earlier event of its lane or order
      key not applied, ...; ``error`` says what). Nothing is lost by applying it again: if it did
      land, it comes back as a duplicate.
    """

    event_id: str
    outcome: Outcome
    command_index: int | None = None
    op: str | None = None
    command: str | None = None
    error: str | None = None
    error_class: str | None = None
    undo_error: str | None = None
    #: Refused before sending because its keys span several hash slots (see ``error``).
    cross_slot: bool = False
    #: Why a ``RETRY`` is to be retried (a transient reason such as ``connection``, ``CLUSTERDOWN``).
    reason: str | None = None
    #: A ``FAILED`` event that failed earlier: the group's verdict found in its marker (nothing
    #: ran; see :mod:`postbox.effects.verdicts`). ``error_class``/``error`` are the verdict's.
    earlier: Verdict | None = None

    @property
    def applied(self) -> bool:
        return self.outcome is Outcome.APPLIED

    @property
    def duplicate(self) -> bool:
        return self.outcome is Outcome.DUPLICATE

    @property
    def failed(self) -> bool:
        return self.outcome is Outcome.FAILED

    @property
    def retry(self) -> bool:
        return self.outcome is Outcome.RETRY

    def raise_for_failure(self) -> "ApplyResult":
        """Return self unless failed; raise :class:`PermanentEffectError` (or
        :class:`EffectEngineError` when the undo failed) describing the failure."""
        if not self.failed:
            return self
        where = f" at command {self.command_index} ({self.command})" if self.command_index is not None else ""
        if self.undo_error:
            raise EffectEngineError(
                f"event {self.event_id}: effect failed{where}: {self.error}; then the undo failed: {self.undo_error}",
                fix="the event's keys may be partially changed; stop the consumer and inspect them",
            )
        cls = CrossSlotEffectError if self.cross_slot else PermanentEffectError
        raise cls(f"event {self.event_id}: effect failed{where}: {self.error}", result=self)


def _outcome_fields(outcome: Outcome) -> dict[str, Any]:
    return {"event_id": "", "outcome": outcome, "command_index": None, "op": None, "command": None, "error": None,
            "error_class": None, "undo_error": None, "cross_slot": False, "reason": None, "earlier": None}


_APPLIED = _outcome_fields(Outcome.APPLIED)
_DUPLICATE = _outcome_fields(Outcome.DUPLICATE)
#: The fields of the result :meth:`EffectsEngine.apply` builds for a settled verdict.
_SETTLED = {Outcome.APPLIED: _APPLIED, Outcome.DUPLICATE: _DUPLICATE}


def _settled(fields: dict[str, Any], event_id: str) -> ApplyResult:
    """An applied or duplicate result (one per event: the common case) built by filling its
    ``__dict__`` (:func:`postbox.frozen.assemble`): the frozen ``__init__`` costs ~1.8 µs."""
    result = assemble(ApplyResult, fields)
    result.__dict__["event_id"] = event_id
    return result


class _Event(NamedTuple):
    """One event as the engine sends it. A tuple (built by :data:`_new_event`, read by C-level
    field getters): a slots dataclass's ``__init__`` is a Python call of 10 arguments per event,
    in the apply worker's GIL-holding time."""

    #: Its place in the batch (the results' index; ``index`` would shadow ``tuple.index``).
    number: int
    #: The event id's UTF-8 (sent as bytes: the packer places bytes without encoding them).
    eid: bytes
    #: What the handler described (its commands are read back only to name a failing one).
    effects: Effects
    marker: bytes
    #: The legacy-layout marker also checked (None: transition off, same key, or another slot).
    legacy: bytes | None
    failures: bytes
    slot: int
    #: ARGV and KEYS entries the event takes in a call, and their bytes (the call's bounds).
    args: int
    size: int
    #: The event's shape (see apply_effects.lua's header): legacy flag, then each command's.
    shape: bytes

    @property
    def event_id(self) -> str:
        """The id as the caller gave it (asked only to describe a failure or a retry)."""
        return self.eid.decode("utf-8")


#: ``_Event(*fields)`` from a tuple of its fields, without the generated Python ``__new__``.
_new_event = tuple.__new__
_ARGS = operator.attrgetter("args")
_SIZE = operator.attrgetter("size")


@dataclass(slots=True)
class _Call:
    events: list[_Event]
    slot: int
    reply: Any = None
    keys: list[bytes] = field(default_factory=list)
    argv: list[bytes] = field(default_factory=list)


class EffectsEngine:
    """Applies batches of ``(EventRef, Effects)`` for one consumer group. See the module docs.

    ``client`` is a ``redis.Redis`` or ``redis.RedisCluster`` (bytes replies, i.e. without
    ``decode_responses``). ``slot_aligned`` puts failure streams in the event's slot (default: on
    for a cluster); ``strict_slots`` refuses events with an effect key outside the event's slot
    (default: on for a cluster; the test harness turns it on everywhere so handlers are
    cluster-ready from the start). ``functions_dir`` holds the user effect functions (default:
    ``POSTBOX_LUA_DIR``, else none: never the working directory's files). ``legacy_markers`` (default on): also treat an
    event as a duplicate when its marker exists under the layout of postbox before the marker
    identity change (derived from the event's effects as that version did; on a cluster only when
    that key is in the event's slot) — leave it on until every record a group may redeliver was
    consumed by this version (one marker TTL), then turn it off to save its cost (see bench/effects.py).
    ``node_wait``: on a cluster, how long a node's calls may take before the node is put down
    (its events then come back as retries at once until it answers a PING again; see
    :mod:`postbox.effects.nodes`). ``replicas``: how many replicas each apply must reach before
    it is reported applied (a number, or ``auto``: one when the primary has a connected replica;
    :mod:`postbox.effects.replicas`); ``waitaof_timeout`` bounds that wait too.
    """

    def __init__(
        self,
        client: "redis.Redis | redis.RedisCluster",
        group: str,
        *,
        marker_ttl: timedelta = DEFAULT_MARKER_TTL,
        batch_size: int = DEFAULT_BATCH_SIZE,
        failures_maxlen: int = DEFAULT_FAILURES_MAXLEN,
        namespace: str = "postbox",
        functions_dir: Path | None | str = "default",
        slot_aligned: bool | None = None,
        strict_slots: bool | None = None,
        waitaof_timeout: timedelta = timedelta(seconds=5),
        durability_refresh_s: float = 60.0,
        legacy_markers: bool = True,
        node_wait: timedelta = timedelta(seconds=3),
        replicas: Replicas = "auto",
    ) -> None:
        if getattr(client, "get_encoder", None) and client.get_encoder().decode_responses:
            raise EffectEngineError("the Redis client decodes responses; postbox needs bytes replies (decode_responses=False)")
        if marker_ttl < timedelta(milliseconds=1):
            raise InvalidEffectError(f"marker_ttl {marker_ttl} must be positive")
        if batch_size < 1:
            raise InvalidEffectError(f"batch_size {batch_size} must be at least 1")
        self.client = client
        self.group = group
        self.cluster = isinstance(client, redis.RedisCluster)
        self.layout = KeyLayout(namespace, group, slot_aligned=self.cluster if slot_aligned is None else slot_aligned)
        self.strict_slots = self.cluster if strict_slots is None else strict_slots
        self.legacy_markers = legacy_markers
        self.namespace = namespace
        #: The group registry entry is still to be written (a transient refusal at load).
        self._registry_pending = False
        self.batch_size = batch_size
        self.marker_ttl_ms = round(marker_ttl / timedelta(milliseconds=1))
        self.failures_maxlen = failures_maxlen
        #: How long a wait (WAITAOF, WAIT for replicas) may take before the apply is unconfirmed.
        self.waitaof_timeout_ms = round(waitaof_timeout / timedelta(milliseconds=1))
        self.replicas: Replicas = replicas
        self._durability_refresh_s = durability_refresh_s
        self._durability: tuple[float, Durability] | None = None
        #: Which servers the verdict was read on; set when a connection reaches another.
        self._watch = server_watch.ServerWatch()
        self._durability_lock = threading.Lock()
        #: Longest wait for one cluster node's calls before it is put down (plus the wait's timeout).
        self.node_wait_s = node_wait.total_seconds()
        self._health = NodeHealth()
        #: When the slot map was last read because a node was down (see :meth:`_follow_failover`).
        self._slots_read_at = 0.0
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        fdir = default_functions_dir() if functions_dir == "default" else functions_dir
        self.script: ApplyScript = build_script(Path(fdir) if fdir is not None else None)
        self._header = [
            _PROTOCOL,
            group.encode("utf-8"),
            str(self.marker_ttl_ms).encode(),
            str(failures_maxlen).encode(),
            str(self.marker_ttl_ms).encode(),
        ]

    # -- public API -------------------------------------------------------------------------

    def apply(
        self,
        events: Iterable[tuple[EventRef, Effects]],
        *,
        partial: bool = False,
        order: Sequence[Hashable | None] | None = None,
    ) -> list[ApplyResult]:
        """Apply events in order; one :class:`ApplyResult` per event, in input order.

        Each event is an :class:`EventRef` (id + routing tag: build it with
        :func:`~postbox.effects.keys.event_ref`) and the :class:`Effects` its handler described.
        Events of one hash slot take effect in input order; ``order`` (one key per event, None for
        none) extends that to events sharing a key whose slots live on different cluster nodes
        (the runtime passes each record's partition and Kafka key): such an event is sent only once
        the earlier one is applied.

        ``partial``: a transient failure (a node unreachable or down, CLUSTERDOWN, OOM, ...) comes
        back as ``RETRY`` results for the events it held back while the others are applied — on a
        cluster, a master that is down holds back only the events whose slots live on it (and
        those ordered after them). Without ``partial`` the first such failure is raised as
        :class:`TransientEffectError` once every node answered (retry the same batch later: what
        did land comes back as duplicates).

        Raises :class:`EffectEngineError` for an unexpected error reply, :class:`EffectConfigError`
        for a refusal no retry fixes. Permanent per-event failures are results, not exceptions.
        """
        pairs = events if isinstance(events, list) else list(events)
        verdicts = self.apply_outcomes(pairs, partial=partial, order=order)
        return [_settled(_SETTLED[v], ref.id) if isinstance(v, Outcome) else v for v, (ref, _fx) in zip(verdicts, pairs)]

    def apply_outcomes(
        self,
        events: Iterable[tuple[EventRef, Effects]],
        *,
        partial: bool = False,
        order: Sequence[Hashable | None] | None = None,
    ) -> list[Outcome | ApplyResult]:
        """:meth:`apply` without an object per settled event: an event applied or found a
        duplicate is given as ``Outcome.APPLIED`` / ``Outcome.DUPLICATE`` itself (its id is the
        caller's), any other (``FAILED``, ``RETRY``) as its full :class:`ApplyResult`. Same
        arguments, order, errors and guarantees as :meth:`apply`.

        Why: the consumer runtime applies whole batches and reads only the outcome of the events
        that went well (nearly all of them); building, then freeing, an ``ApplyResult`` for each
        cost ~0.5 µs of GIL-holding time per event."""
        prepared, results = self._prepare_all(events)
        error = None
        if prepared:
            seen, used = self._verdict_now()
            error = self._apply_waves(prepared, results, order, wait_for(used, self.waitaof_timeout_ms))
            if isinstance(error, _NotSent) and not self.cluster:  # nothing went out: send under the new server's verdict
                seen, used = self._verdict_now()
                error = self._apply_waves(prepared, results, order, wait_for(used, self.waitaof_timeout_ms))
            self._same_server(seen, used)
        if error is not None and not partial:
            raise error
        if self._registry_pending and error is None:
            self._publish_group()  # Redis took this batch: it takes the registry entry too
        return results  # type: ignore[return-value]  # _apply_waves gave every prepared event its verdict

    def apply_one(self, ref: EventRef, effects: Effects) -> ApplyResult:
        """Apply one event (one round trip)."""
        return self.apply([(ref, effects)])[0]

    def durability(self, *, refresh: bool = False) -> Durability:
        """Whether acknowledged applies are durable (checked once a minute; see ``durability``).

        Raises :class:`EffectConfigError` when a server can evict the group's keys (see
        :mod:`postbox.effects.eviction`): no setting of the consumer makes that safe, and it is
        raised before a batch is sent, so nothing is applied on such a server.

        Thread-safe (the apply worker and the health probe ask): a caller waits for a re-read
        under way, so it never answers with the verdict of a server that changed."""
        with self._durability_lock:
            return self._durability_now(refresh)

    def _durability_now(self, refresh: bool) -> Durability:
        now = time.monotonic()
        stale = self._watch.stale  # a connection reached a server the verdict was not read on
        if self._health.take_recovered():
            refresh = True  # a node came back: it may have restarted with other settings
        elif self._durability is not None and self._health.any_down() and not stale:
            return self._durability[1]  # re-read once every node answers (a read now would wait on the down one)
        if refresh or stale or self._durability is None or now - self._durability[0] > self._durability_refresh_s:
            changes = self._watch.changes
            verdict = self._read_durability()
            if verdict.eviction is not None:
                self._durability = None  # asked again next time: the operator may fix it meanwhile
                raise eviction.refusal(verdict.eviction)
            if not verdict.durable and (self._durability is None or self._durability[1] != verdict):
                log.warning("Redis effects are %s", verdict)
            self._durability = (now, verdict)
            self._watch.settle(changes)
        return self._durability[1]

    def _read_durability(self) -> Durability:
        """The verdict of every server (but the cluster nodes known down: none of their events
        is sent, and a node that comes back is read then), their run ids noted first."""
        skip = self._health.down_nodes()
        try:
            self._watch.known(server_watch.run_ids(self.client, skip))
            return check_durability(self.client, skip=skip, replicas=self.replicas)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            refused = login_error(exc)  # credentials revoked: a configuration error, not an outage
            raise refused or TransientEffectError(f"cannot reach Redis to check durability: {exc}", reason="connection") from exc
        except (*CLUSTER_UNSETTLED, ResponseError) as exc:  # a failover under way, LOADING, BUSY: ask again later
            reason = transient_reason(exc)
            if reason is None:
                raise EffectEngineError(f"unexpected error reply while checking durability: {exc}") from exc
            raise TransientEffectError(f"cannot check durability now ({reason}): {exc}", reason=reason) from exc

    def _verdict_now(self) -> tuple[int, Durability]:
        """The count of server changes seen and the verdict (read again if one is new)."""
        if self.cluster and self._health.any_down():
            self._follow_failover()  # before the verdict: a promoted replica has its own
        changes = self._watch.changes
        return changes, self.durability()

    def _same_server(self, seen: int, used: Durability) -> None:
        """Raise when a connection reached another server (or the slot map changed) since
        ``seen`` changes, while writing under ``used`` (see :mod:`postbox.effects.server_watch`),
        and the verdict now differs: what was sent there is not known durable (sent without the
        WAITAOF it needs, or waiting for other replicas, or not durable at all), so it is retried —
        what did land comes back as duplicates."""
        if self._watch.changes == seen:
            return
        now = self.durability()
        if now.plan != used.plan:
            raise TransientEffectError(
                f"the Redis server changed under the engine (a restart, a failover, a moved address or slot): "
                f"it was {used}, it is {now}", reason="server-changed",
                fix="nothing to do: the batch is retried on the server as it is now",
            )

    def load(self, *, publish: bool = True) -> str:
        """SCRIPT LOAD the apply script (on every primary of a cluster) and, with ``publish`` (a
        consumer starting; not a health check that only loads), publish the group's marker TTL in
        the group registry (``postbox doctor`` checks it against how long Kafka can redeliver, see
        :mod:`postbox.effects.groups`); return the script's SHA1."""
        for client in self._all_clients():
            self._load(client)
        if publish:
            self._registry_pending = True
            self._publish_group()
        return self.script.sha

    def _publish_group(self) -> None:
        """Write the group's registry entry. It is advisory (doctor reads it; applying does not
        need it): a transient refusal (OOM, BUSY, ...) leaves it pending, retried after the next
        apply Redis took; a refusal that will not pass (ACL, a key of another type) is an
        :class:`EffectConfigError`."""
        try:
            groups.publish(self.client, self.group, timedelta(milliseconds=self.marker_ttl_ms), namespace=self.namespace)
        except (MovedError, AskError) as exc:
            if self.cluster:
                raise self._classify(exc) from exc
            # A plain client on a node of a cluster: the caller's cluster check names the fix
            # (postbox.redis_client.check_not_cluster_node); nothing can be published that way.
            log.debug("group registry not published: %s", exc)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise self._classify(exc) from exc
        except ResponseError as exc:
            refused = self._classify(exc)
            if not isinstance(refused, TransientEffectError):
                raise EffectConfigError(
                    f"cannot publish group {self.group!r} in the group registry {groups.registry_key(self.namespace)!r}: {exc}",
                    fix="the consumer's Redis user needs HSET on that key (it is under the namespace's "
                    "'<namespace>:*' key pattern, POSTBOX_REDIS_KEY_PATTERNS), and the key must be a hash",
                ) from exc
            log.warning("group registry not published yet (%s); retried after the next apply", refused)
            return
        self._registry_pending = False

    def marker_key(self, ref: EventRef) -> bytes:
        """The dedupe marker key of the event (for inspection and tests): group and event only."""
        return self.layout.marker(ref.id.encode("utf-8"), ref.tag_bytes)

    def already_applied(self, refs: Sequence[EventRef]) -> list[bool]:
        """Whether this group applied each event before (its marker says ``1``), in order; the
        markers found are then as durable as an apply's duplicates. A marker holding a failure
        verdict (:mod:`postbox.effects.verdicts`) is not applied. See :meth:`record_failures`,
        which the runtime uses; this one writes nothing (but the touch a wait needs).

        Raises :class:`TransientEffectError` (retry later: Redis unreachable, WAITAOF unconfirmed,
        MOVED) or :class:`EffectConfigError` (ACL, a server that can evict)."""
        found = self._read_markers([(ref, None) for ref in refs])
        return [value is not None and not is_verdict(value) for value in found]

    def record_failures(self, failures: Sequence[tuple[EventRef, str, str]]) -> list[bytes | None]:
        """Leave each failed event's verdict in its marker (``(ref, error class, error)``; a dead
        letter owed, see :mod:`postbox.effects.verdicts`) unless the marker already says something,
        and return what it said before: None (the verdict is written now), ``b"1"`` (the group
        applied the event: a redelivery, not poison) or an earlier verdict (its dead letter may be
        acknowledged already). A :class:`~postbox.effects.keys.ReplayRef` replaces an earlier
        verdict with its own (it still reads ``b"1"`` as applied).

        Why: the runtime calls this before it dead-letters a handler failure and before the events
        after it are applied, so whoever reads the event next — after a crash, a lost commit, in a
        window run — is told it failed instead of running it after its successors. A handler
        changed between delivery and redelivery (a deploy, outside state) may raise on an event it
        applied the first time: that redelivery is a duplicate. Markers found are made as durable
        as an apply's duplicates (the runtime commits past them): on a WAITAOF server each is
        rewritten unchanged on one connection and ``WAITAOF 1 0`` (and the replica wait) follows.
        Whether the server is durable at all is the caller's check (:meth:`durability`). Only the
        current layout's marker is read: during the legacy transition an event marked under the old
        layout (keyed by its effects, which a failed handler did not describe) reads as not applied.

        Raises as :meth:`already_applied`."""
        return self._read_markers([(ref, handler_verdict(error_class, error)) for ref, error_class, error in failures])

    def mark_delivered(self, failures: Sequence[tuple[EventRef, str, str]]) -> None:
        """Note in each failed event's marker that its dead letter is acknowledged (``D``), so a
        later reader finishes it without sending it again. Only a marker that is there is
        rewritten (``XX KEEPTTL``: an expired one is not made again). Best effort by design: not
        noted, the dead letter may be written a second time, never the event run again. Raises
        :class:`TransientEffectError` when Redis cannot take it."""
        by_node = self._by_node([self.marker_key(ref) for ref, _, _ in failures])
        for client, numbers, markers in by_node:
            commands: list[Command] = [
                (b"SET", marker, handler_verdict(failures[n][1], failures[n][2], delivered=True), b"XX", b"KEEPTTL")
                for n, marker in zip(numbers, markers)
            ]  # fmt: skip
            self._exchange(client, commands)

    def withdraw_failures(self, refs: Sequence[EventRef]) -> None:
        """Remove the verdicts :meth:`record_failures` just wrote for these events (nothing after
        them was applied: their dead letter was not written), so the retry runs them in their place
        — a handler fixed meanwhile applies them. Only for verdicts the caller wrote itself (a plain
        ``DEL``). Raises :class:`TransientEffectError` when Redis cannot take it: the verdicts then
        stay, and the retry dead-letters those events without running them (safe, not in place)."""
        for client, _, markers in self._by_node([self.marker_key(ref) for ref in refs]):
            self._exchange(client, [(b"DEL", marker) for marker in markers])

    def _read_markers(self, asked: Sequence[tuple[EventRef, bytes | None]]) -> list[bytes | None]:
        """Each marker's value (None: absent), writing ``verdict`` where one is given and the
        marker is absent (``SET NX GET``; a replayed copy's replaces an earlier verdict); with a
        WAITAOF server the markers found are touched and waited for. One pipeline per node."""
        if not asked:
            return []
        seen, used = self._verdict_now()
        wait = wait_for(used, self.waitaof_timeout_ms)
        markers = [self.marker_key(ref) for ref, _ in asked]
        found: list[bytes | None] = [None] * len(asked)
        for client, numbers, keys in self._by_node(markers):
            commands: list[Command] = [
                (b"GET", key) if asked[n][1] is None else (b"SET", key, asked[n][1], b"NX", b"PX", _num(self.marker_ttl_ms), b"GET")  # type: ignore[misc]
                for n, key in zip(numbers, keys)
            ]  # fmt: skip
            for n, value in zip(numbers, self._exchange(client, commands)):
                found[n] = value
            replaced = [(n, key) for n, key in zip(numbers, keys)
                        if type(asked[n][0]) is ReplayRef and asked[n][1] is not None and is_verdict(found[n])]  # fmt: skip
            if replaced:
                self._exchange(client, [(b"SET", key, asked[n][1], b"XX", b"KEEPTTL") for n, key in replaced])  # type: ignore[misc]
                for n, _ in replaced:
                    found[n] = None
            touched: list[Command] = [(b"SET", key, value, b"XX", b"KEEPTTL") for n, key in zip(numbers, keys) if (value := found[n]) is not None]
            if wait is not None and touched:
                replies = self._exchange(client, touched + list(wait.commands))
                self._confirmed(wait, replies[len(touched):])
        self._same_server(seen, used)
        return found

    def _by_node(self, markers: list[bytes]) -> list[tuple[redis.Redis, list[int], list[bytes]]]:
        """The markers grouped by the node that holds them (one group on a single server)."""
        if not self.cluster:
            return [(self.client, list(range(len(markers))), markers)]  # type: ignore[list-item]
        by_node: dict[str, tuple[redis.Redis, list[int], list[bytes]]] = {}
        for number, marker in enumerate(markers):
            name, client = self._node_for(key_slot(marker))
            entry = by_node.setdefault(name, (client, [], []))
            entry[1].append(number)
            entry[2].append(marker)
        return list(by_node.values())

    def _exchange(self, client: redis.Redis, commands: list[Command]) -> list[Any]:
        """One round trip of plain commands; an error reply (MOVED: the slot map is read again)
        raised as the engine's error."""
        try:
            replies = round_trip(client, commands, self._watched)
        except (redis.RedisError, redis.RedisClusterException) as exc:
            raise self._classify(exc) from exc
        for reply in replies:
            if self.cluster and isinstance(reply, (MovedError, AskError)):
                self._refresh_topology()  # the slot moved: the retry asks its new node
            if isinstance(reply, BaseException):
                raise self._classify(reply)
        return replies

    def _confirmed(self, wait: Wait, replies: list[Any]) -> None:
        """Raise unless ``replies`` (the wait's) confirm the apply: the local AOF fsync, the
        replicas (:mod:`postbox.effects.replicas`). Replicas that did not confirm mark the
        verdict stale, so ``auto`` reads the topology again before the retry."""
        try:
            wait.check(replies)
        except ResponseError as exc:
            raise self._classify(exc) from exc
        except TransientEffectError as exc:
            if exc.reason == "replicas":
                self._watch.mark_stale()
            raise

    def legacy_marker_key(self, ref: EventRef, effects: Effects) -> bytes:
        """The marker key the layout before the identity change gave this event with these effects."""
        eid = ref.id.encode("utf-8")
        return self.layout.legacy_marker(eid, legacy_anchor(effects.keys(), eid))

    def failures_key(self, ref: EventRef) -> bytes:
        """The failure stream the event reports to."""
        return self.layout.failures(ref.tag_bytes)

    def check_slots(self, ref: EventRef, effects: Effects) -> int:
        """The event's slot; :class:`CrossSlotEffectError` if an effect key lies outside it."""
        slot = ref.slot
        outside = [k for k in effects.keys() if key_slot(k) != slot]
        if outside:
            raise CrossSlotEffectError(_outside_slot_message(ref, outside, slot), fix=_CROSS_SLOT_FIX)
        return slot

    # -- preparing and packing ----------------------------------------------------------------

    def _prepare_all(self, events: Iterable[tuple[EventRef, Effects]]) -> tuple[list[_Event], list[Outcome | ApplyResult | None]]:
        """Each event's keys, shape and bounds as an :class:`_Event` to send, and the results list:
        None for an event to send, the result of one refused before sending (keys outside its
        slot). One loop over the batch with its constants bound once, and the legacy-marker
        check's common case decided inline: a method call per event, and the attribute lookups in
        it, cost ~0.3 µs of the apply worker's GIL-holding time per event."""
        layout, cluster, check_slot, strict = self.layout, self.cluster, self.cluster or self.strict_slots, self.strict_slots
        marker_in, failures_in, legacy_writable = layout.marker_in, layout.failures_in, layout.legacy_writable
        shared_failures = None if layout.slot_aligned else failures_in(b"")  # one stream for the group: asked once
        # The legacy key is the current marker for an event keyed under its own routing tag
        # (aggregate_keys) when the group needs no escaping: see _legacy_marker.
        tagged_is_current = self.legacy_markers and layout.group_unescaped
        prepared: list[_Event] = []
        add = prepared.append
        results: list[Outcome | ApplyResult | None] = []
        for index, (ref, effects) in enumerate(events):
            if not isinstance(ref, EventRef) or not isinstance(effects, Effects) or not isinstance(ref.id, str) or not ref.id:
                _refuse_pair(index, ref, effects)
            if effects._functions is not None:  # the builder's running record (see Effects.__init__)
                self._check_functions(ref.id, effects._functions)
            eid = ref.id.encode("utf-8")
            tag = tag_text(ref.tag.encode("utf-8", "surrogateescape"))  # ref.tag_bytes, without the property's call
            marker = marker_in(eid, tag)
            # The slot matters on a cluster and for the strict check; a single server skips the CRC.
            slot = key_slot(marker) if check_slot else 0
            refused = self._outside_slot(ref, effects, slot) if strict else None
            results.append(refused)
            if refused is not None:
                continue
            keys = effects._keys
            if tagged_is_current and keys and keys[0].startswith(b"{%s}" % tag):
                legacy = None
                shape = b"-"
                size = effects._size + 2 * len(marker) + len(eid)
            else:
                legacy = self._legacy_marker(eid, keys, tag, marker, slot)
                shape = b"-" if legacy is None else b"w" if legacy_writable(eid) else b"l"
                size = effects._size + 2 * len(marker) + len(eid) + (len(legacy) if legacy else 0)
            if type(ref) is ReplayRef:  # sent again on purpose: a verdict in its marker does not bind it
                shape += b"r"
            add(_new_event(_Event, (
                index, eid, effects, marker, legacy, shared_failures or failures_in(tag), slot if cluster else 0,
                len(keys) + len(effects._args) + 5, size, shape + b"".join(effects._shape),
            )))  # fmt: skip
        return prepared, results

    @staticmethod
    def _outside_slot(ref: EventRef, effects: Effects, slot: int) -> ApplyResult | None:
        """The FAILED result of an event with an effect key outside its slot (``strict_slots``), or None."""
        outside = [k for k in effects.keys() if key_slot(k) != slot]
        if not outside:
            return None
        return ApplyResult(
            ref.id, Outcome.FAILED, None, None, None,
            _outside_slot_message(ref, outside, slot) + "; " + _CROSS_SLOT_FIX, "permanent", cross_slot=True,
        )  # fmt: skip

    def _check_functions(self, event_id: str, names: set[str]) -> None:
        """Every user function the event calls has its file (else the consumer stops: a deployment error)."""
        missing = sorted(names - self.script.functions)
        if missing:
            raise EffectConfigError(
                f"event {event_id}: effect function {missing[0]!r} has no file "
                f"{missing[0]}.lua in the functions folder {self.script.folder or '(none configured)'}"
                f" (known: {', '.join(sorted(self.script.functions)) or 'none'})",
                fix="deploy the function's .lua file with the handler and name its folder in POSTBOX_LUA_DIR "
                "(the working directory's consumers/lua is not read unless named), or fix the name the handler "
                "calls; then restart the consumer",
            )

    def _legacy_marker(self, eid: bytes, keys: Sequence[bytes], tag: bytes, marker: bytes, slot: int) -> bytes | None:
        """The legacy-layout marker to check too, or None: transition off, the same key as the
        current marker (handlers keyed by their aggregate, groups without ``%``/``:``), or on a
        cluster a key outside the event's slot (one call cannot read it: documented limit).
        ``keys``: the event's effect keys in command order (the anchor is the first one's tag)."""
        if not self.legacy_markers:
            return None
        if keys and self.layout.group_unescaped and keys[0].startswith(b"{%s}" % tag):
            return None  # keyed by its routing tag (aggregate_keys): the legacy key is the current marker
        first = keys[:1]
        anchor = legacy_anchor(first, eid)
        if anchor == tag and self.layout.group_unescaped:
            return None
        legacy = self.layout.legacy_marker(eid, anchor)
        if legacy == marker or (self.cluster and key_slot(legacy) != slot):
            return None
        return legacy

    def _calls(self, lane: list[_Event], wait: Wait | None) -> list[_Call]:
        """The lane's events cut into calls within ``batch_size``, :data:`MAX_CALL_ARGS` and
        :data:`MAX_CALL_BYTES`, in order."""
        if len(lane) <= self.batch_size and sum(map(_ARGS, lane)) <= MAX_CALL_ARGS and sum(map(_SIZE, lane)) <= MAX_CALL_BYTES:
            return [self._encode(lane, wait)]  # the common lane, within every bound: no step per event
        calls: list[_Call] = []
        current: list[_Event] = []
        args = size = 0
        for event in lane:
            if current and (
                len(current) >= self.batch_size or args + event.args > MAX_CALL_ARGS or size + event.size > MAX_CALL_BYTES
            ):
                calls.append(self._encode(current, wait))
                current, args, size = [], 0, 0
            current.append(event)
            args += event.args
            size += event.size
        if current:
            calls.append(self._encode(current, wait))
        return calls

    def _encode(self, events: list[_Event], wait: Wait | None = None) -> _Call:
        """Pack events into KEYS and ARGV (protocol 3, documented at the top of apply_effects.lua):
        KEYS in the order the script reads them, ARGV the header, each distinct event shape once,
        then per event its shape's number, its id and its commands' arguments.

        ``wait``: the call is followed by a wait (WAITAOF, WAIT) on its connection, so a duplicate
        must write (touch its marker) for the wait to cover the marker it relied on."""
        per_event = self.layout.slot_aligned
        keys: list[bytes] = [] if per_event else [self.layout.failures_in(b"")]
        shapes: dict[bytes, bytes] = {}
        body: list[bytes] = []
        for event in events:
            number = shapes.get(event.shape)
            if number is None:
                number = shapes[event.shape] = _num(len(shapes) + 1)
            body.append(number)
            body.append(event.eid)
            keys.append(event.marker)
            if event.legacy is not None:
                keys.append(event.legacy)
            if per_event:
                keys.append(event.failures)
            keys += event.effects._keys
            body += event.effects._args
        argv: list[bytes] = [
            *self._header, b"0" if wait is None else b"1", _num(len(events)), b"1" if per_event else b"0", _num(len(shapes)),
            *shapes, *body,
        ]  # fmt: skip
        return _Call(events, events[0].slot, keys=keys, argv=argv)

    def _results(self, call: _Call, results: list[Outcome | ApplyResult | None]) -> None:
        """Fill ``results`` from the call's reply ``[codes, details]`` (see apply_effects.lua):
        the outcome itself for an applied or duplicate event, a result for any other."""
        codes, details = call.reply
        events = call.events
        first, last, count = events[0].number, events[-1].number, len(events)
        # A call's events are in batch order (lanes and waves keep it), so first..last spanning
        # exactly ``count`` numbers means they are those numbers, in order: the common call (its
        # events applied, one after the other) is filled by one slice, not a step per event.
        if last - first == count - 1 and len(codes) == count and codes.count(1) == count:
            results[first : last + 1] = [Outcome.APPLIED] * count
            return
        at = 0
        for event, code in zip(events, codes):
            if code == 1:
                results[event.number] = Outcome.APPLIED
            elif code == 2:
                results[event.number] = Outcome.DUPLICATE
            else:
                results[event.number] = self._failure(event, code, details[at : at + 4])
                at += 4

    def _failure(self, event: _Event, code: int, detail: list[Any]) -> ApplyResult:
        if code == 6:
            verdict = parse_verdict(detail[2].encode("utf-8") if isinstance(detail[2], str) else bytes(detail[2]))
            return ApplyResult(event.event_id, Outcome.FAILED, error=verdict.error, error_class=verdict.error_class, earlier=verdict)
        number, op, error = int(detail[0]), _text(detail[1]), self.script.explain(_text(detail[2]))
        command = event.effects.commands[number - 1]
        if code == 5:
            raise EffectConfigError(
                f"event {event.event_id}: Redis refused command {number - 1} ({command.describe()}) for the "
                f"deployment, not for the event's data: {error}",
                fix=_CONFIG_FIX,
            )
        undo_error = _text(detail[3]) if code == 4 else None
        if undo_error:
            log.error("event %s: undo failed after %s: %s", event.event_id, error, undo_error)
        return ApplyResult(
            event.event_id, Outcome.FAILED, number - 1, op, command.describe(), error, "permanent", undo_error
        )

    # -- sending --------------------------------------------------------------------------------

    def _apply_waves(
        self, prepared: list[_Event], results: list[Outcome | ApplyResult | None], order: Sequence[Hashable | None] | None,
        wait: Wait | None,
    ) -> TransientEffectError | None:
        """Send the prepared events wave by wave (:func:`~postbox.effects.nodes.plan_waves`), each
        wave's nodes in parallel; fill ``results``; return the first transient failure, if any.
        An event whose lane or order key already has an event not applied is not sent (``RETRY``),
        nor is one whose node is down. ``wait``: what follows each round of calls (WAITAOF, WAIT)."""
        if not self.cluster:  # one node, one lane, never put down: every event is in wave 0
            return self._send_wave(prepared, {0: self._node_for(0)}, wait, results)
        nodes = {slot: self._node_for(slot) for slot in {e.slot for e in prepared}}
        places = [Placement(e.slot, nodes[e.slot][0], order[e.number] if order is not None else None) for e in prepared]
        waves = plan_waves(places)
        held: set[tuple[str, Hashable]] = set()
        first: TransientEffectError | None = None
        for wave in range(max(waves) + 1):
            sending: list[_Event] = []
            for event, place in ((e, p) for e, p, w in zip(prepared, places, waves) if w == wave):
                down = self._health.error(place.node)
                if _hold_keys(place) & held:
                    results[event.number] = _retry(event, "an earlier event of its slot or order key is not applied yet", "ordered")
                elif down is not None:
                    results[event.number] = _retry(event, f"Redis node {place.node} is down: {down}", "node-down")
                    first = first or TransientEffectError(f"Redis node {place.node} is down: {down}", reason="node-down")
                else:
                    sending.append(event)
            error = self._send_wave(sending, nodes, wait, results) if sending else None
            first = first or error
            for event, place, _ in ((e, p, w) for e, p, w in zip(prepared, places, waves) if w == wave):
                result = results[event.number]
                if isinstance(result, ApplyResult) and result.retry:  # a retry is always a full result
                    held |= _hold_keys(place)
        return first

    def _send_wave(
        self, events: list[_Event], nodes: dict[int, tuple[str, redis.Redis]], wait: Wait | None, results: list[Outcome | ApplyResult | None]
    ) -> TransientEffectError | None:
        """One wave: pack each slot lane into calls, run every node's calls in parallel (retrying
        calls redirected by MOVED after a slot-map refresh), fill ``results``."""
        lanes: dict[int, list[_Event]] = {}
        for event in events:
            lanes.setdefault(event.slot, []).append(event)
        pending = [self._calls(lane, wait) for lane in lanes.values()]
        first: TransientEffectError | None = None
        for attempt in range(_ATTEMPTS):
            by_node: dict[str, tuple[redis.Redis, list[list[_Call]]]] = {}
            for calls in pending:
                name, client = nodes[calls[0].slot] if attempt == 0 else self._node_for(calls[0].slot)
                by_node.setdefault(name, (client, []))[1].append(calls)
            moved: list[list[_Call]] = []
            for outcome in self._run_nodes(by_node, wait):
                for call in outcome.done:
                    self._results(call, results)
                for call in outcome.failed:
                    for event in call.events:
                        results[event.number] = _retry(event, str(outcome.error), outcome.error.reason if outcome.error else "")
                first = first or outcome.error
                moved += outcome.moved
            if not moved:
                return first
            log.info("retrying %d script call lane(s) after MOVED (attempt %d)", len(moved), attempt + 2)
            try:
                self._refresh_topology()
            except TransientEffectError as exc:
                first = first or exc
                break
            pending = moved
        error = TransientEffectError(f"script calls still redirected after {_ATTEMPTS} attempts (slots moving)", reason="retries")
        for calls in moved:
            for call in calls:
                for event in call.events:
                    results[event.number] = _retry(event, str(error), error.reason)
        return first or error

    def _run_nodes(self, by_node: dict[str, tuple[redis.Redis, list[list[_Call]]]], wait: Wait | None) -> list[_NodeOutcome]:
        """Every node's lanes, in parallel on a cluster. A node with no reply within the node wait
        is put down and its calls come back failed (its thread finishes on its own; the calls may
        still land, and a retry then finds them as duplicates)."""
        if not self.cluster:
            return [self._run_node(name, client, lanes, wait) for name, (client, lanes) in by_node.items()]
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=32, thread_name_prefix="postbox-apply")
        futures = {name: self._pool.submit(self._run_node, name, client, lanes, wait) for name, (client, lanes) in by_node.items()}
        wait_s = self.node_wait_s + (self.waitaof_timeout_ms / 1000 if wait is not None else 0.0)
        concurrent.futures.wait(futures.values(), timeout=wait_s)
        outcomes: list[_NodeOutcome] = []
        for name, future in futures.items():
            if future.done():
                outcomes.append(future.result())  # re-raises an engine or configuration error
                continue
            error = TransientEffectError(f"Redis node {name} gave no reply within {wait_s:.1f} s", reason="timeout")
            self._mark_down(name, by_node[name][0], str(error))
            outcomes.append(_NodeOutcome(failed=[c for lane in by_node[name][1] for c in lane], error=error))
        return outcomes

    def _run_node(self, name: str, client: redis.Redis, lanes: list[list[_Call]], wait: Wait | None) -> _NodeOutcome:
        """One node's calls, round by round (the n-th call of each lane, pipelined): a lane's calls
        go out one after the other, so its events keep their order. A transient failure fails
        this round's and every later call of the node; MOVED hands the lane's rest back."""
        outcome = _NodeOutcome()
        active = list(lanes)
        round_no = 0
        while active:
            batch = [lane[round_no] for lane in active]
            try:
                replies = self._send_round(client, batch, wait)
            except TransientEffectError as exc:
                outcome.error = exc
                outcome.failed = [call for lane in active for call in lane[round_no:]]
                if self.cluster and exc.reason == "connection":
                    self._mark_down(name, client, str(exc))
                return outcome
            still: list[list[_Call]] = []
            for lane, call, reply in zip(active, batch, replies):
                if isinstance(reply, (MovedError, AskError)):
                    outcome.moved.append(lane[round_no:])
                    continue
                call.reply = reply
                outcome.done.append(call)
                if round_no + 1 < len(lane):
                    still.append(lane)
            active = still
            round_no += 1
        return outcome

    def _send_round(self, client: redis.Redis, calls: list[_Call], wait: Wait | None) -> list[Any]:
        """One pipeline of calls to one node: NOSCRIPT reloads the script and resends, ASK is
        answered on the target; a MOVED reply is returned as is (the caller refreshes the slot
        map); any other error reply raises (classified)."""
        replies: dict[int, Any] = {}
        pending = calls
        for attempt in range(_ATTEMPTS):
            retry: list[_Call] = []
            for call, reply in zip(pending, self._send(client, pending, wait)):
                if isinstance(reply, AskError) and not isinstance(reply, MovedError) and self.cluster:  # MovedError is an AskError
                    reply = self._ask(call, reply, wait)
                if isinstance(reply, NoScriptError):
                    retry.append(call)
                elif isinstance(reply, BaseException) and not (self.cluster and isinstance(reply, (MovedError, AskError))):
                    raise self._classify(reply)
                else:
                    replies[id(call)] = reply
            if not retry:
                return [replies[id(call)] for call in calls]
            log.info("reloading the apply script after NOSCRIPT (attempt %d)", attempt + 2)
            self._load(client)
            pending = retry
        raise TransientEffectError(
            f"{len(pending)} script call(s) still refused after {_ATTEMPTS} attempts (script cache flushed)", reason="retries"
        )

    def _mark_down(self, name: str, client: redis.Redis, error: str) -> None:
        self._health.mark_down(name, error, client.ping)

    def _ask(self, call: _Call, redirect: AskError, wait: Wait | None) -> Any:
        """Answer ASK (the call's slot is migrating and its keys are not on the source any more):
        ``ASKING`` then the call on the node the redirect names, on one connection — ASKING covers
        the next command only, and the slot map must not change (the source still owns the slot
        until the migration ends). The target runs it when it has every key of the call; a call
        with keys still missing there gets TRYAGAIN (transient: retried until the migration ends).
        Returns the reply (an exception object for an error reply)."""
        client = self._node_client(redirect.host, redirect.port)
        reply = self._send(client, [call], wait, asking=True)[0]
        if isinstance(reply, NoScriptError):
            self._load(client)
            reply = self._send(client, [call], wait, asking=True)[0]
        return reply

    def _send(self, client: redis.Redis, calls: list[_Call], wait: Wait | None, *, asking: bool = False) -> list[Any]:
        """One round trip to ``client``'s node: [ASKING,] the calls' EVALSHAs [, the wait], packed
        by :func:`postbox.effects.wire.round_trip`; the calls' replies, an error reply as its
        exception object. Raises the classified error for a connection error or timeout, or
        when the wait (WAITAOF, WAIT) did not confirm."""
        sha = self.script.sha.encode()
        commands: list[Command] = [(b"ASKING",)] if asking else []
        for call in calls:  # every argument bytes: packed without a per-argument Python step (wire.pack)
            commands.append((b"EVALSHA", sha, _num(len(call.keys)), *call.keys, *call.argv))
        if wait is not None:
            commands += wait.commands
        try:
            replies = round_trip(client, commands, self._watched)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise self._classify(exc) from exc
        if asking:
            replies.pop(0)
        if wait is not None:
            self._confirmed(wait, replies[len(replies) - len(wait.commands):])
            del replies[len(replies) - len(wait.commands):]
        return replies

    def _watched(self, conn: Any) -> None:
        """Watch ``conn`` before sending on it (:mod:`postbox.effects.server_watch`); raise
        :class:`_NotSent` when it reached a server the verdict in use was not read on."""
        self._watch.watch(conn)
        if self._watch.elsewhere:
            raise _NotSent(
                "a connection reached a Redis server the durability verdict was not read on (a failover, a restart): nothing sent",
                reason="server-changed", fix="nothing to do: the verdict is read again on that server and the batch sent under it",
            )

    def _classify(self, exc: BaseException) -> Exception:
        refused = login_error(exc)  # wrong credentials or CA: no retry fixes them
        if refused is not None:
            return refused
        reason = transient_reason(exc)
        if reason is not None and isinstance(exc, (redis.ConnectionError, redis.TimeoutError)):
            return TransientEffectError(f"Redis unreachable or reply lost: {exc}", reason=reason)
        if isinstance(exc, ClusterCrossSlotError):
            return EffectEngineError(f"Redis said CROSSSLOT for a call the engine grouped by slot: {exc}")
        if isinstance(exc, redis.exceptions.NoPermissionError) or str(exc).startswith("NOPERM"):
            return EffectConfigError(f"Redis refused the apply for lack of permission (ACL): {exc}", fix=_CONFIG_FIX)
        if _SCRIPT_KILLED in str(exc):
            return TransientEffectError(
                f"an operator stopped the apply script with SCRIPT KILL: {exc}",
                reason="SCRIPT_KILLED",
                fix="nothing of the call was written (Redis kills only scripts that have not written); it is retried",
            )
        if reason is not None:  # an error code that heals by waiting, or a cluster not settled yet
            return TransientEffectError(f"Redis refused the call ({reason}): {exc}", reason=reason)
        return EffectEngineError(f"unexpected error reply from the apply script: {self.script.explain(str(exc))}")

    def _load(self, client: redis.Redis) -> None:
        try:
            sha = client.script_load(self.script.source)
        except ResponseError as exc:
            message = self.script.explain(str(exc))
            raise EffectEngineError(
                f"Redis refused to compile the apply script: {message}",
                fix="fix the Lua file named above (the user effect functions of POSTBOX_LUA_DIR)",
            ) from exc
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise self._classify(exc) from exc
        if _text(sha) != self.script.sha:
            raise EffectEngineError(f"SCRIPT LOAD returned {sha!r}, expected {self.script.sha}")

    def _node_for(self, slot: int) -> tuple[str, redis.Redis]:
        """The name (``host:port``; ``""`` for a single server) and client of the slot's node."""
        if not self.cluster:
            return "", self.client  # type: ignore[return-value]
        cluster: redis.RedisCluster = self.client  # type: ignore[assignment]
        try:
            node = cluster.nodes_manager.get_node_from_slot(slot)
        except redis.exceptions.SlotNotCoveredError as exc:
            raise TransientEffectError(f"slot {slot} is not served by any node: {exc}", reason="CLUSTERDOWN") from exc
        return node.name, cluster.get_redis_connection(node)

    def _follow_failover(self) -> None:
        """While a node is down, read the slot map again (at most twice a second, from the nodes
        that answer first): once the cluster promoted a dead master's replica, its slots are
        served by the replica, and the dead node, serving none, is forgotten. Without it the slot
        map stays the one from before the failover, and those events wait for the dead node. The
        other nodes' connections are left alone (no disconnect): their applies go on meanwhile."""
        now = time.monotonic()
        if now - self._slots_read_at < FAILOVER_CHECK_S:
            return
        self._slots_read_at = now
        down = self._health.down_nodes()
        cluster: redis.RedisCluster = self.client  # type: ignore[assignment]
        try:
            cluster.nodes_manager.initialize(last_failed_node_name=next(iter(down), None), disconnect_startup_nodes_pools=False)
        except (redis.ConnectionError, redis.TimeoutError, redis.RedisClusterException) as exc:
            log.debug("cannot read the cluster's slot map while a node is down: %s", exc)
            return
        serving = {nodes[0].name for nodes in cluster.nodes_manager.slots_cache.values() if nodes}
        replaced = down - serving
        if replaced:
            self._health.forget(replaced)
            self._watch.mark_stale()  # other primaries now: their durability is read again

    def _refresh_topology(self) -> None:
        try:
            self.client.nodes_manager.initialize()  # type: ignore[union-attr]
        except (redis.ConnectionError, redis.TimeoutError, redis.RedisClusterException) as exc:
            raise TransientEffectError(f"cannot refresh the cluster's slot map: {exc}", reason="CLUSTERDOWN") from exc
        self._watch.mark_stale()  # the primaries may be others now: their durability is read again

    def _node_client(self, host: str, port: int) -> redis.Redis:
        """The connection pool of the cluster node at host:port (an ASK target)."""
        cluster: redis.RedisCluster = self.client  # type: ignore[assignment]
        node = cluster.get_node(host=host, port=port)  # type: ignore[no-untyped-call]
        if node is None:
            self._refresh_topology()
            node = cluster.get_node(host=host, port=port)  # type: ignore[no-untyped-call]
        if node is None:
            raise TransientEffectError(f"ASK names {host}:{port}, which is not in the cluster's node list", reason="ASK")
        return cluster.get_redis_connection(node)

    def _all_clients(self) -> Sequence[redis.Redis]:
        if not self.cluster:
            return [self.client]  # type: ignore[list-item]
        cluster: redis.RedisCluster = self.client  # type: ignore[assignment]
        return [cluster.get_redis_connection(n) for n in cluster.get_primaries()]  # type: ignore[no-untyped-call]


_CONFIG_FIX = (
    "the consumer's Redis user may not touch a key (or run a command) the effects need: add the key pattern to "
    "POSTBOX_REDIS_KEY_PATTERNS (or the command to the user's ACL) and regenerate the ACL (`postbox down && postbox up` "
    "locally), or fix the handler's keys / the Lua function; then restart the consumer (nothing was committed)"
)

_CROSS_SLOT_FIX = (
    "give every key of one event the event's hash tag: keys from "
    "postbox.effects.aggregate_keys(event.aggregate_type, event.aggregate_id), like '{order:42}:state', "
    "or declare the handler's routing key (@app.handler(..., routing_key=lambda event: <a key of its slot>))"
)


def _refuse_pair(index: int, ref: object, effects: object) -> NoReturn:
    """Raise for what is not an (EventRef with a non-empty id, Effects) pair, naming it."""
    if not isinstance(ref, EventRef) or not isinstance(ref.id, str) or not ref.id:
        raise InvalidEffectError(
            f"event #{index}: expected an EventRef with a non-empty id, got {ref!r:.80}",
            fix="pass postbox.effects.event_ref(event) (or EventRef(event_id, routing_tag)) with the effects",
        )
    raise InvalidEffectError(f"event {ref.id}: expected an Effects, got {type(effects).__name__}")


def _outside_slot_message(ref: EventRef, keys: list[bytes], slot: int) -> str:
    return (
        f"event {ref.id}: effect keys outside the event's Redis Cluster hash slot {slot} "
        f"(routing tag {ref.tag[:60]!r}): {describe_slots(keys)}; expected slot {slot}"
    )


_NUMS = [str(i).encode() for i in range(4096)]


def _num(n: int) -> bytes:
    return _NUMS[n] if n < 4096 else str(n).encode()


def _text(value: Any) -> str:
    return value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else str(value)


class _NotSent(TransientEffectError):
    """Nothing of the round was sent: its connection reached another server (see ``_watched``)."""


@dataclass(slots=True)
class _NodeOutcome:
    """What one node's thread did with its lanes: calls answered, calls failed (with the
    transient error), and lanes redirected by MOVED from a call on (to resend after a refresh)."""

    done: list[_Call] = field(default_factory=list)
    failed: list[_Call] = field(default_factory=list)
    moved: list[list[_Call]] = field(default_factory=list)
    error: TransientEffectError | None = None


def _retry(event: _Event, error: str, reason: str) -> ApplyResult:
    return ApplyResult(event.event_id, Outcome.RETRY, error=error, error_class="transient", reason=reason)


def _hold_keys(place: Placement) -> set[tuple[str, Hashable]]:
    """What an event not applied holds back: its lane, and its order key if it has one."""
    return {("lane", place.lane)} | ({("order", place.order)} if place.order is not None else set())
