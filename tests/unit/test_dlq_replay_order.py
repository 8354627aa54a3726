"""`postbox dlq replay` sends one aggregate's dead letters back in the order they were dead-lettered.

Found in review: a handler bug dead-letters a whole batch, and the dead-letter producer stamps the
records of one batch with the same millisecond. plan_replay ordered by that timestamp only
(newest first, then reversed), so records with equal timestamps came out in reverse dead-letter
order: an aggregate's OrderPlaced and OrderCancelled, dead-lettered together, were replayed
Cancelled first, and the consumer applied them in that order.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from postbox.incident.dlq import DeadLetter, plan_replay
from postbox.incident.records import render

NOW = datetime(2026, 1, 10, 12, 0, tzinfo=timezone.utc)


class Msg:
    """A confluent-kafka Message look-alike (a record of the dead-letter topic)."""

    def __init__(self, headers: list, key: bytes, partition: int, offset: int, ts: int) -> None:
        self._h, self._k, self._p, self._o, self._ts = headers, key, partition, offset, ts

    def value(self): return b"{}"
    def headers(self): return self._h
    def key(self): return self._k
    def topic(self): return "outbox.event.t.dlq"
    def partition(self): return self._p
    def offset(self): return self._o
    def timestamp(self): return (1, self._ts)


class FakeKafka:
    def topic_exists(self, name): return name == "outbox.event.t"
    def partitions(self, name): return [0, 1, 2]


def dead_letter(n: int, key: str, partition: int, offset: int, ts_ms: int, origin_offset: int | None = None) -> DeadLetter:
    headers = [("id", f"e{n}".encode()), ("event_type", b"T"),
               ("created_at", (NOW - timedelta(minutes=5)).isoformat().encode()),
               ("postbox.error", b"boom"), ("postbox.error.class", b"HandlerError:ValueError"),
               ("postbox.group", b"g"), ("postbox.origin.topic", b"outbox.event.t"),
               ("postbox.origin.partition", str(partition).encode()), ("postbox.origin.offset", str(100 + offset if origin_offset is None else origin_offset).encode())]
    return DeadLetter(render(Msg(headers, key.encode(), partition, offset, ts_ms)))


def test_one_batch_of_dead_letters_is_replayed_in_dead_letter_order() -> None:
    ts = int(NOW.timestamp() * 1000) - 60_000
    placed, cancelled = dead_letter(1, "o1", 1, 0, ts), dead_letter(2, "o1", 1, 1, ts)
    items = plan_replay(FakeKafka(), [placed, cancelled], marker_ttl=timedelta(days=8), now=NOW)
    assert [i.letter.event_id for i in items] == ["e1", "e2"]
    assert all(i.status == "ready" for i in items)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 3)), min_size=1, max_size=12))
def test_each_aggregate_is_replayed_in_the_order_it_was_dead_lettered(rows: list[tuple[str, int]]) -> None:
    """Dead letters of one key sit in one dead-letter partition in the order they failed, with
    timestamps that never go back (one producer stamps them as it sends); the replay keeps
    each key's order whatever the timestamps tie on and whatever order the scan returned."""
    base = int(NOW.timestamp() * 1000) - 60_000
    letters, next_offset, clock = [], {0: 0, 1: 0, 2: 0}, {0: base, 1: base, 2: base}
    for n, (key, tick) in enumerate(rows):
        partition = "abc".index(key)
        clock[partition] += tick
        letters.append(dead_letter(n, key, partition, next_offset[partition], clock[partition]))
        next_offset[partition] += 1
    items = plan_replay(FakeKafka(), list(reversed(letters)), marker_ttl=timedelta(days=8), now=NOW)
    for key in "abc":
        sent = [i.letter.record.offset for i in items if i.letter.record.key == key]
        assert sent == sorted(sent), f"key {key}: replayed in dead-letter offsets {sent}"


def test_dead_letters_written_out_of_order_go_back_in_their_origin_order() -> None:
    """The consumer writes a dead letter refused as too large again, reference-only, after the
    batch's other dead letters: an aggregate's earlier event can sit after its later one in the
    dead-letter topic. Replay sends each origin partition's dead letters in their origin order
    (the order the events had), keeping the place the others take."""
    ts = int(NOW.timestamp() * 1000) - 60_000
    later = dead_letter(1, "o1", 1, 0, ts)  # origin offset 100
    other = dead_letter(2, "o2", 2, 0, ts)  # another partition, origin offset 100
    earlier = dead_letter(3, "o1", 1, 1, ts + 1, origin_offset=99)
    items = plan_replay(FakeKafka(), [later, other, earlier], marker_ttl=timedelta(days=8), now=NOW)
    assert [i.letter.event_id for i in items] == ["e3", "e2", "e1"]
