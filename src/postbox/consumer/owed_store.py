"""The dead-letter verdicts a partition owes, kept in Redis so they outlive the process that found them.

A record whose effect failed after later records of its partition were applied, and whose dead
letter is not acknowledged yet, must be dead-lettered on the retry *without being run again*: run
again, its effect could now succeed and take effect after its successors (order per aggregate).
The same holds for a record whose dead letter was acknowledged while its partition retries from
an earlier record (it must not be run, nor dead-lettered, twice). :attr:`PartitionState.owed
<postbox.consumer.partition_state.PartitionState.owed>` keeps those verdicts in memory; this
store keeps them for the partition's next reader too: the same consumer after a crash or a
restart, or the member the partition moves to in a rebalance.

One hash per group and partition, ``<ns>:owed:<escaped group>:<topic>:<partition>``: field the
offset, value the verdict and the record's event id (JSON). A loaded verdict is used only for the
record it was found on (same event id), so a topic deleted and created again under the same name
does not inherit it. The key expires after the marker TTL: past that, Kafka cannot redeliver the
record. Writes happen only when a verdict is owed or paid (a dead letter not acknowledged: rare);
each assignment reads its partition's hash once, before its first record is run.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import asdict, fields
from typing import Any

import redis

from postbox.consumer.blocks import TopicPartitionKey
from postbox.consumer.dlq_record import Failure
from postbox.consumer.partition_state import PartitionState
from postbox.effects.keys import KeyLayout
from postbox.errors import EffectConfigError, TransientEffectError
from postbox.effects.redis_errors import transient_reason

log = logging.getLogger("postbox.consumer")

#: The fields a saved verdict may carry (one saved by another version may have others: dropped).
_FAILURE_FIELDS = frozenset(f.name for f in fields(Failure))

#: A partition's loaded verdicts: offset → (verdict, the event id it was found on).
Loaded = dict[int, tuple[Failure, str | None]]


class OwedStore:
    """Load and save the owed verdicts of a group's partitions (see the module docs)."""

    def __init__(self, client: "redis.Redis | redis.RedisCluster", layout: KeyLayout, ttl_ms: int) -> None:
        self.client = client
        self.ttl_ms = ttl_ms
        self._prefix = layout.owed_prefix

    def key(self, tp: TopicPartitionKey) -> bytes:
        return b"%s%s:%d" % (self._prefix, tp[0].encode("utf-8"), tp[1])

    def load(self, tps: Sequence[TopicPartitionKey]) -> dict[TopicPartitionKey, "Loaded | TransientEffectError"]:
        """Each partition's owed verdicts (empty when it owes none), or the transient error its key
        met (on a cluster, a node that is down holds back only the partitions whose key it holds).
        Raises :class:`TransientEffectError` when Redis cannot answer at all,
        :class:`EffectConfigError` when it refuses (ACL)."""
        pipe = self.client.pipeline(transaction=False)
        for tp in tps:
            pipe.hgetall(self.key(tp))
        replies = _execute(pipe, "read the owed dead-letter verdicts", raise_on_error=False)
        out: dict[TopicPartitionKey, Loaded | TransientEffectError] = {}
        for tp, reply in zip(tps, replies):
            if isinstance(reply, Exception):
                out[tp] = _error(reply, "read the owed dead-letter verdicts")
            else:
                out[tp] = _decode(tp, reply)
        return out

    def save(self, states: Iterable[PartitionState]) -> None:
        """Write each partition's owed verdicts as they are now (a partition owing none: its key
        deleted). Raises :class:`TransientEffectError` when Redis cannot take them."""
        pipe = self.client.pipeline(transaction=False)
        for state in states:
            key = self.key(state.key())
            pipe.delete(key)
            if state.owed:
                pipe.hset(key, mapping={str(offset): _encode(failure, state.owed_ids.get(offset))
                                        for offset, failure in state.owed.items()})
                pipe.pexpire(key, self.ttl_ms)
        _execute(pipe, "save the owed dead-letter verdicts")


def _encode(failure: Failure, event_id: str | None) -> str:
    return json.dumps({"failure": asdict(failure), "event_id": event_id})


def _decode(tp: TopicPartitionKey, hash_fields: dict[bytes, bytes]) -> Loaded:
    loaded: Loaded = {}
    for offset, value in hash_fields.items():
        try:
            entry = json.loads(value)
            known = {k: v for k, v in entry["failure"].items() if k in _FAILURE_FIELDS}
            loaded[int(offset)] = (Failure(**known), entry.get("event_id"))
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            # Without its verdict the record is run again, which is what the verdict prevents: say so.
            log.error("owed dead-letter verdict of %s[%d] offset %r cannot be read (%s): the record will be run again",
                      tp[0], tp[1], offset, exc)
    return loaded


def _execute(pipe: Any, what: str, *, raise_on_error: bool = True) -> list[Any]:
    try:
        return list(pipe.execute(raise_on_error=raise_on_error))
    except Exception as exc:  # noqa: BLE001 - classified by _error, which re-raises what it does not know
        raise _error(exc, what) from exc


def _error(exc: BaseException, what: str) -> "TransientEffectError":
    """A Redis failure as the runtime's error: transient (retry later) or, raised at once, a
    refusal no retry fixes (configuration). Anything else is re-raised by the caller."""
    reason = transient_reason(exc)
    if reason is not None:
        unreachable = isinstance(exc, (redis.ConnectionError, redis.TimeoutError))
        return TransientEffectError(f"cannot {what}: {exc}" if unreachable else f"Redis refused to {what}: {exc}", reason=reason)
    if isinstance(exc, redis.ResponseError):
        raise EffectConfigError(
            f"Redis refused to {what}: {exc}",
            fix="the consumer's Redis user needs HGETALL, HSET, DEL and PEXPIRE on the '<namespace>:owed:*' keys "
            "(under the namespace's key pattern, POSTBOX_REDIS_KEY_PATTERNS)",
        ) from exc
    raise exc
