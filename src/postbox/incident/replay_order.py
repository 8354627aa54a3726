"""Whether replaying a dead letter would put its event after later events of its aggregate.

A replayed record is appended to its origin partition: consumers apply it after every record
already there. When the aggregate (the record's key) has events after the dead letter's origin
offset that consumers applied meanwhile, the replayed event takes effect after them, out of the
aggregate's order (an OrderPlaced replayed after its OrderShipped). The plan names those events
and holds the item back without ``--force``; the operator decides whether the handler tolerates it.

Events that are themselves replayed in the same run go back in their order, and copies of the same
event do not count. A partition holding more records after the dead letter than the plan reads
is not checked and is held back the same way, saying so.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from postbox.codec.headers import EventHeaders
from postbox.kafka_cluster import Kafka

if TYPE_CHECKING:
    from postbox.incident.dlq import ReplayItem

#: The most records read after the dead letters of one partition.
LATER_SCAN_LIMIT = 200_000
#: How many of an aggregate's later events a reason names.
NAMED = 3


@dataclass
class PartitionTail:
    """The records after the first dead letter of one origin partition: key → [(offset, event id)]."""

    start: int
    end: int
    by_key: dict[bytes | None, list[tuple[int, str | None]]] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return self.end - self.start <= LATER_SCAN_LIMIT


def later_events(tail: PartitionTail, key: bytes | None, after: int, skip_ids: set[str]) -> list[tuple[int, str | None]]:
    """The aggregate's records after offset ``after``, less copies of the events in ``skip_ids``."""
    return [(offset, event_id) for offset, event_id in tail.by_key.get(key, []) if offset > after and event_id not in skip_ids]


def hold_reason(later: list[tuple[int, str | None]], topic: str, partition: int, key_text: str | None) -> str:
    """Why an item waits for ``--force``: the later events of its aggregate, the first few named."""
    named = ", ".join(f"{event_id or '?'} (offset {offset})" for offset, event_id in later[:NAMED])
    more = f" and {len(later) - NAMED} more" if len(later) > NAMED else ""
    return (f"{len(later)} later event(s) of aggregate {key_text!r} are already in {topic}[{partition}]: {named}{more}; "
            "the replayed copy would be applied after them, out of the aggregate's order")


def read_tails(kafka: Kafka, wanted: dict[tuple[str, int], int]) -> dict[tuple[str, int], PartitionTail]:
    """Each partition's records from ``wanted`` (first origin offset + 1) to its end (at most the limit)."""
    tails: dict[tuple[str, int], PartitionTail] = {}
    for (topic, partition), start in wanted.items():
        _, high = kafka.watermarks(topic, [partition])[partition]
        tails[(topic, partition)] = PartitionTail(start, high)
    starts = {tp: t.start for tp, t in tails.items() if t.complete and t.end > t.start}
    ends = {tp: tails[tp].end for tp in starts}
    for msg in kafka.scan(starts, ends, max_records=LATER_SCAN_LIMIT * max(1, len(starts))):
        tail = tails[(msg.topic(), msg.partition())]
        tail.by_key.setdefault(msg.key(), []).append((msg.offset(), EventHeaders.parse(msg.headers()).event_id))
    return tails


def hold_out_of_order(kafka: Kafka, items: Iterable["ReplayItem"], *, force: bool) -> None:
    """Mark every ready item whose aggregate has later events in its partition ``unsafe`` (or,
    with ``force``, say so in its reason), naming them."""
    ready = [(i, where) for i in items if i.status == "ready" and (where := _origin(i)) is not None]
    skip_ids = {eid for i, _ in ready if (eid := i.letter.event_id)}
    wanted: dict[tuple[str, int], int] = {}
    for _, (tp, offset) in ready:
        wanted[tp] = min(wanted.get(tp, offset + 1), offset + 1)
    tails = read_tails(kafka, wanted)
    for item, ((topic, partition), offset) in ready:
        tail = tails[(topic, partition)]
        record = item.letter.record
        if not tail.complete:
            reason = (f"{tail.end - offset - 1:,} records follow it in {topic}[{partition}], more than the {LATER_SCAN_LIMIT:,} "
                      "the plan reads to find later events of its aggregate")
        else:
            later = later_events(tail, record.raw_key, offset, skip_ids)
            if not later:
                continue
            reason = hold_reason(later, topic, partition, record.key)
        item.status = "ready" if force else "unsafe"
        item.reason = "; ".join(filter(None, [item.reason, reason + (" (--force given)" if force else "")]))


def _origin(item: "ReplayItem") -> tuple[tuple[str, int], int] | None:
    """((topic, partition), offset) the dead letter came from, when the replay goes back there."""
    letter = item.letter
    offset = letter.origin_offset
    if item.partition is None or offset is None or item.partition != letter.origin_partition:
        return None
    return (item.topic, item.partition), offset


__all__ = ["LATER_SCAN_LIMIT", "PartitionTail", "hold_out_of_order", "hold_reason", "later_events"]
