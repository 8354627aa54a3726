"""Unit tests of the incident tooling's pure parts: parsing, rendering, selection, replay safety."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from postbox.errors import ConfigError
from postbox.incident.dlq import DeadLetter, Selection, plan_replay
from postbox.incident.offsets import parse_target
from postbox.incident.records import field_matches, payload_field, render, safe_text, uuid7_time
from postbox.incident.redis_state import human_duration, marker_ttl, parse_duration
from postbox.incident.tail import Filters, parse_start, parse_where
from postbox.incident.trace import parse_event_id
from postbox.outbox import uuid7

NOW = datetime(2026, 1, 10, 12, 0, tzinfo=timezone.utc)


class Msg:
    """A confluent-kafka Message look-alike."""

    def __init__(self, value, headers, key=b"k1", topic="outbox.event.t", partition=0, offset=5, ts=1_700_000_000_000):
        self._v, self._h, self._k, self._t, self._p, self._o, self._ts = value, headers, key, topic, partition, offset, ts

    def value(self): return self._v
    def headers(self): return self._h
    def key(self): return self._k
    def topic(self): return self._t
    def partition(self): return self._p
    def offset(self): return self._o
    def timestamp(self): return (1, self._ts)


def test_parse_start_forms() -> None:
    assert parse_start("beginning").kind == "beginning" and parse_start("end").kind == "end"
    assert parse_start("last:10").value == 10 and parse_start("1200").value == 1200 and parse_start("offset:7").value == 7
    assert parse_start("2026-01-10T11:00:00Z").value == int(datetime(2026, 1, 10, 11, tzinfo=timezone.utc).timestamp() * 1000)
    assert parse_start("15m", now=NOW).value == int((NOW - timedelta(minutes=15)).timestamp() * 1000)
    with pytest.raises(ValueError, match="--from"):
        parse_start("yesterday-ish")


def test_parse_target_and_duration() -> None:
    assert parse_target("earliest").kind == "earliest" and parse_target("42").offset == 42
    assert parse_target("2h", now=NOW).timestamp_ms == int((NOW - timedelta(hours=2)).timestamp() * 1000)
    with pytest.raises(ValueError, match="--to"):
        parse_target("someday")
    assert parse_duration("8d") == timedelta(days=8) and parse_duration("90") == timedelta(seconds=90)
    assert human_duration(timedelta(days=3)) == "3.0 d" and human_duration(30) == "30 s"


def test_marker_ttl_flag_env_default(monkeypatch) -> None:
    monkeypatch.delenv("POSTBOX_MARKER_TTL", raising=False)
    assert marker_ttl() == timedelta(days=8)
    monkeypatch.setenv("POSTBOX_MARKER_TTL", "2d")
    assert marker_ttl() == timedelta(days=2) and marker_ttl("1h") == timedelta(hours=1)
    with pytest.raises(ConfigError, match="POSTBOX_MARKER_TTL"):
        monkeypatch.setenv("POSTBOX_MARKER_TTL", "soon")
        marker_ttl()


def test_event_ids() -> None:
    eid = uuid7()
    assert parse_event_id(f" {str(eid).upper()} ") == str(eid)
    assert abs((uuid7_time(str(eid)) - datetime.now(timezone.utc)).total_seconds()) < 5
    assert uuid7_time("b804bfa8-86a9-45ef-b1cd-ca599689c53d") is None  # v4: no time inside
    assert parse_event_id("42") == "42"  # a stock outbox's bigint id column (#12.13: the consumer's rule)
    with pytest.raises(ValueError, match="not an event id"):
        parse_event_id("not an id")


def test_safe_text_and_fields() -> None:
    assert safe_text(b"order-1") == ("order-1", "utf-8")
    assert safe_text(b"\x00\xff") == ("00ff", "hex") and safe_text(b"a\x01") == ("6101", "hex")
    assert safe_text(None) == (None, "null")
    payload = {"customer": {"id": "c-1"}, "items": [{"sku": "s1"}], "total": 100, "paid": True, "coupon": None}
    assert payload_field(payload, "customer.id") == (True, "c-1")
    assert payload_field(payload, "items.0.sku") == (True, "s1")
    assert payload_field(payload, "items.3.sku") == (False, None)
    assert field_matches(100, "100.0") and not field_matches(100, "abc") and field_matches(True, "true")
    assert field_matches(None, "null")
    assert parse_where(["a.b=1", "c=x=y"]) == [("a.b", "1"), ("c", "x=y")]
    with pytest.raises(ValueError):
        parse_where(["nothing"])


def test_render_json_avro_and_bytes() -> None:
    from postbox.codec import AvroCodec

    headers = [("id", b"e1"), ("event_type", b"OrderCancelled"), ("created_at", b'"2026-01-01T00:00:00Z"'), ("traceparent", None)]
    view = render(Msg(b'{"a": 1}', headers))
    assert view.encoding == "json" and view.payload == {"a": 1} and view.meta.created_at == "2026-01-01T00:00:00Z"
    data = view.as_dict()
    assert data["headers"][2] == {"key": "created_at", "value": '"2026-01-01T00:00:00Z"', "encoding": "utf-8"}
    assert data["headers"][3]["encoding"] == "null" and data["event"]["id"] == "e1"

    codec = AvroCodec()
    value = codec.encode("order", "OrderCancelled", _cancelled(codec))
    avro = render(Msg(value, headers), codec)
    assert avro.encoding == "avro" and avro.writer.startswith("order.OrderCancelled v1")

    raw = render(Msg(b"\x00\xff\xfe", headers, key=b"\xff"))
    assert raw.encoding == "bytes" and raw.value_hex == "00fffe" and raw.decode_error and raw.key == "ff" and raw.key_encoding == "hex"
    assert render(Msg(None, headers)).encoding == "null"

    filters = Filters(key="k1", event_type="OrderCancelled", fields=[("a", "1")])
    assert filters.matches(view) and not Filters(key="other").matches(view)


def _cancelled(codec) -> dict:
    schema = codec.schema_for("order", "OrderCancelled")
    sample = {"order_id": "o1", "reason": "r", "cancelled_at": NOW, "customer_id": "c", "refund_cents": 0}
    return {f["name"]: sample.get(f["name"], "x") for f in schema.parsed["fields"]}


def letter(event_id: str | None, created: datetime | None, *, group="g", cls="EffectFailed:WRONGTYPE", offset=0) -> DeadLetter:
    headers = [("id", event_id.encode() if event_id else None), ("event_type", b"T")]
    if created:
        headers.append(("created_at", created.isoformat().encode()))
    headers += [("postbox.error", b"WRONGTYPE Operation against a key"), ("postbox.error.class", cls.encode()),
                ("postbox.group", group.encode()), ("postbox.origin.topic", b"outbox.event.t"),
                ("postbox.origin.partition", b"1"), ("postbox.origin.offset", b"9")]
    return DeadLetter(render(Msg(b"{}", headers, topic="outbox.event.t.dlq", offset=offset, ts=int(NOW.timestamp() * 1000) - offset)))


class FakeKafka:
    def topic_exists(self, name): return name == "outbox.event.t"
    def partitions(self, name): return [0, 1, 2]


class ReadersKafka(FakeKafka):
    """Two groups read outbox.event.t; "t-other" published a 30-minute marker TTL."""

    def groups_on_topic(self, topic):
        return {"t-live": {0: 5}, "t-other": {1: 2}} if topic == "outbox.event.t" else {}


def test_replay_plan_checks_the_shortest_ttl_of_the_groups_the_record_reaches() -> None:
    """A replayed dead letter goes back to its origin topic, so every group reading it sees it
    again: it is safe only while the shortest-lived marker of those groups still holds the event.
    Found in review: `dlq replay` checked the flag/env/8-day default, so an hour-old dead letter
    was "ready" although a group reading the topic keeps its markers 30 minutes and would apply
    the event a second time."""
    hour_old = letter("e1", NOW - timedelta(hours=1))
    published = {"t-other": timedelta(minutes=30), "t-live": timedelta(days=30), "elsewhere": timedelta(minutes=1)}
    (item,) = plan_replay(ReadersKafka(), [hour_old], marker_ttl=timedelta(days=8), margin=timedelta(0), now=NOW, group_ttls=published)
    assert item.status == "unsafe" and "markers of group t-other live 30 min" in item.reason
    # a group of another topic does not count; with the operator's TTL (group_ttls None) the published ones are not read
    (item,) = plan_replay(ReadersKafka(), [hour_old], marker_ttl=timedelta(days=8), margin=timedelta(0), now=NOW,
                          group_ttls={"elsewhere": timedelta(minutes=1)})
    assert item.status == "ready"
    (item,) = plan_replay(ReadersKafka(), [hour_old], marker_ttl=timedelta(days=8), margin=timedelta(0), now=NOW)
    assert item.status == "ready"
    # the group that dead-lettered it counts too, even with no commits on the topic
    (item,) = plan_replay(ReadersKafka(), [letter("e2", NOW - timedelta(hours=1), group="g-dead")], marker_ttl=timedelta(days=8),
                          margin=timedelta(0), now=NOW, group_ttls={"g-dead": timedelta(minutes=10)})
    assert item.status == "unsafe" and "group g-dead live 10 min" in item.reason


def test_selection_matches_classes_and_groups() -> None:
    d = letter("e1", NOW)
    assert Selection(error_class="EffectFailed").matches(d) and Selection(error_class="WRONGTYPE").matches(d)
    assert Selection(error_class="EffectFailed:WRONGTYPE").matches(d) and not Selection(error_class="DecodeError").matches(d)
    assert Selection(["e1"]).matches(d) and not Selection(["e2"]).matches(d)
    assert not Selection(group="other").matches(d)
    assert d.origin_partition == 1 and d.origin_offset == 9 and d.ref == "outbox.event.t.dlq:0:0"
    assert ("postbox.replay.of", b"outbox.event.t.dlq:0:0") in d.replay_headers()
    assert not any(k.startswith("postbox.error") for k, _ in d.replay_headers())


def test_replay_plan_refuses_past_the_dedupe_window_and_dedupes() -> None:
    ttl = timedelta(days=8)
    fresh, old, again = letter("e1", NOW - timedelta(days=1), offset=1), letter("e2", NOW - timedelta(days=8), offset=2), letter("e1", NOW - timedelta(days=1), offset=3)
    items = plan_replay(FakeKafka(), [fresh, old, again], marker_ttl=ttl, margin=timedelta(hours=1), now=NOW)
    by_ref = {i.letter.ref: i for i in items}
    assert by_ref[old.ref].status == "unsafe" and "may apply it again" in by_ref[old.ref].reason
    statuses = sorted((by_ref[fresh.ref].status, by_ref[again.ref].status))
    assert statuses == ["duplicate", "ready"]
    assert by_ref[fresh.ref].partition == 1
    # inside the margin counts as unsafe; --force lets it through
    edge = letter("e3", NOW - ttl + timedelta(minutes=30))
    assert plan_replay(FakeKafka(), [edge], marker_ttl=ttl, now=NOW)[0].status == "unsafe"
    assert plan_replay(FakeKafka(), [edge], marker_ttl=ttl, now=NOW, force=True)[0].status == "ready"
    # no creation time at all (v4 id, no header, no failed_at): cannot tell, so unsafe
    unknown = letter("b804bfa8-86a9-45ef-b1cd-ca599689c53d", None)
    unknown.record.timestamp_ms = None
    assert plan_replay(FakeKafka(), [unknown], marker_ttl=ttl, now=NOW)[0].status == "unsafe"
