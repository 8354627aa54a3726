"""A public hook to watch what the consumer did with each record: ``ConsumerRuntime(observer=...)``.

Benchmarks, live views and tests need per-record timings (when a record's batch arrived, when
Redis acknowledged its apply) and each record's outcome, which the metrics only give as
histograms and counters. An observer is any callable taking a list of :class:`Observed`; the
pipeline calls it once per settled batch, on the loop's thread, after the batch's apply was
acknowledged (and found durable) and its dead letters acknowledged, before its offsets are
committed. Without an observer (the default) nothing is built: one ``is None`` test per batch.

An observer must be quick (it delays the next batch) and must not raise: an exception it raises
is logged and the consumer goes on, since watching must never change what is delivered. A record
is reported each time it is settled: a record redelivered (after a restart, a rebalance, a retry
of its partition) is reported again, then usually as a duplicate.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from postbox.consumer.batch import Batch, Fate

if TYPE_CHECKING:
    from postbox.consumer.pipeline import Item

log = logging.getLogger("postbox.consumer")

#: What became of an observed record: its effects applied, found a duplicate (applied before,
#: the dedupe marker met), or dead-lettered (its dead letter acknowledged).
APPLIED = "applied"
DUPLICATE = "duplicate"
DEAD_LETTERED = "dead-lettered"

_OUTCOMES = {Fate.APPLIED: APPLIED, Fate.DUPLICATE: DUPLICATE, Fate.DEAD_LETTERED: DEAD_LETTERED}


@dataclass(frozen=True, slots=True)
class Observed:
    """One settled record. Times are wall-clock seconds (``time.time()``), comparable with the
    producer's clock on the same machine.

    ``event_id``: the event's id (from the ``id`` header when the record could not be decoded;
    None when it has none). ``created_at``: the event's ``created_at`` header (None when the record
    has none or could not be decoded). ``kafka_timestamp_ms``: the record's Kafka timestamp (CreateTime or
    LogAppendTime, as the topic says; None when the record has none). ``batch_received``: when
    the batch that brought the record came out of ``consume()``. ``acknowledged``: for an applied
    or duplicate record, when Redis acknowledged the apply of its batch; for a dead-lettered one,
    when its batch settled (its dead letter was acknowledged before)."""

    event_id: str | None
    topic: str
    partition: int
    offset: int
    created_at: datetime | None
    kafka_timestamp_ms: int | None
    batch_received: float
    acknowledged: float
    outcome: str


#: The observer's type: called with the records of one settled batch (in batch order).
Observer = Callable[[Sequence[Observed]], None]


def settled_records(items: Sequence["Item"], batch: Batch, acknowledged: float, settled_at: float,
                    event_id: Callable[["Item"], str | None]) -> list[Observed]:
    """The records of ``items`` that ``batch`` finished (held, blocked or pending ones are not:
    they are reported when a later batch settles them)."""
    out: list[Observed] = []
    fates = batch.fates
    for item in items:
        fate = fates.get(item.tp, {}).get(item.offset)
        outcome = _OUTCOMES.get(fate) if fate is not None else None
        if outcome is None:
            continue
        kind, stamp = item.msg.timestamp()
        out.append(Observed(
            event_id(item), item.tp[0], item.tp[1], item.offset, item.event.created_at if item.event is not None else None,
            stamp if kind != 0 else None,  # 0: TIMESTAMP_NOT_AVAILABLE
            item.received, settled_at if fate is Fate.DEAD_LETTERED else acknowledged, outcome,
        ))  # fmt: skip
    return out


def notify(observer: Observer, records: list[Observed]) -> None:
    """Hand ``records`` to ``observer``; what it raises is logged, never propagated."""
    if not records:
        return
    try:
        observer(records)
    except Exception:  # noqa: BLE001 - watching must not change delivery (module docs)
        log.exception("the consumer's observer raised; the consumer goes on")


__all__ = ["APPLIED", "DEAD_LETTERED", "DUPLICATE", "Observed", "Observer", "notify", "settled_records"]
