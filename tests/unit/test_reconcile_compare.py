"""`postbox reconcile`'s comparison: every event of a window gets the state its hops prove.

Each example draws a fate per event (never published, or published N times; per group applied,
dead-lettered, failed with its dead letter owed, pending, committed past without an apply, or
applied so long ago its marker expired), builds from it what each hop would hold, and checks the
comparison tells every fate back, with the right findings, fixes and exit code.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

from hypothesis import given, settings, strategies as st

from postbox.effects.verdicts import handler_verdict
from postbox.incident.reconcile import (
    APPLIED, DEAD_LETTERED, MARKER_GONE, MISSING, PENDING, Copy, GroupState, OutboxState, Row, Window, reconcile,
)  # fmt: skip

NOW = datetime(2026, 12, 3, 18, 0, tzinfo=timezone.utc)
SINCE, UNTIL = NOW - timedelta(hours=2), NOW - timedelta(hours=1)
TTL = timedelta(days=8)
TOPIC = "outbox.event.order"
FATES = ("applied", "dead-lettered", "owed", "pending", "missing", "expired")

event_fate = st.tuples(
    st.integers(min_value=0, max_value=3),  # copies in Kafka (0: never published)
    st.lists(st.sampled_from(FATES), min_size=2, max_size=2),  # one fate per group
    st.booleans(),  # row still retained
)


def build(fates: list[tuple[int, list[str], bool]]) -> tuple[Window, OutboxState, list[Copy], list[GroupState], dict]:
    """The hop states the fates leave, and what the comparison must say."""
    rows, copies = [], []
    committed: list[dict] = [{}, {}]
    markers: list[dict] = [{}, {}]
    letters: list[set] = [set(), set()]
    expected = {"groups": [dict.fromkeys((APPLIED, DEAD_LETTERED, PENDING, MISSING, MARKER_GONE), 0) for _ in range(2)],
                "missing_in_kafka": 0, "doubled": 0}  # fmt: skip
    offset = 0
    for i, (n, per_group, retained) in enumerate(fates):
        eid = str(uuid.UUID(int=i + 1))
        created = SINCE + timedelta(seconds=i)
        if retained or n == 0:
            rows.append(Row(eid, "order", f"o{i}", created))
        if n == 0:
            expected["missing_in_kafka"] += 1
            continue
        expected["doubled"] += n > 1
        first = offset
        for _ in range(n):
            copies.append(Copy(eid, TOPIC, 0, offset, int(created.timestamp() * 1000) + offset, created))
            offset += 1
        for g, fate in enumerate(per_group):
            state = _place(fate, eid, first, committed[g], markers[g], letters[g])
            expected["groups"][g][state] += 1
    # a group's committed offset is one offset for the partition: the highest any fate asked for,
    # unless a pending fate needs it at or below its record — then only pending fates sit after it
    groups = []
    for g in range(2):
        groups.append(GroupState(f"g{g}", _commit(committed[g]), markers[g], frozenset(letters[g]), TTL))
    return Window(SINCE, UNTIL, NOW), OutboxState(rows, oldest_retained=SINCE - timedelta(days=1)), copies, groups, expected


def _place(fate: str, eid: str, first: int, committed: dict, markers: dict, letters: set) -> str:
    committed[first] = fate != "pending"
    if fate == "applied":
        markers[eid] = b"1"
        return APPLIED
    if fate == "dead-lettered":
        letters.add(eid)
        markers[eid] = handler_verdict("HandlerFailed:ValueError", "boom", delivered=True)
        return DEAD_LETTERED
    if fate == "owed":
        markers[eid] = handler_verdict("HandlerFailed:ValueError", "boom")
        return DEAD_LETTERED
    return {"pending": PENDING, "missing": MISSING, "expired": MISSING}[fate]


def _commit(consumed: dict[int, bool]) -> dict[tuple[str, int], int]:
    """Offsets per record → the partition's committed offset (a test builds consumed runs only)."""
    if not consumed:
        return {}
    ends = [o + 1 for o, done in consumed.items() if done]
    return {(TOPIC, 0): max(ends)} if ends else {}


@settings(max_examples=300, deadline=None)
@given(st.lists(event_fate, max_size=12))
def test_each_fate_is_told_back(fates: list[tuple[int, list[str], bool]]) -> None:
    # one partition has one committed offset: the fates of a group must form "consumed, then
    # pending"; shape them so (pending only after every consumed record of that group)
    shaped = _consumed_then_pending(fates)
    window, outbox, copies, groups, expected = build(shaped)
    result = reconcile(window, outbox, copies, groups)
    assert result.missing_in_kafka == expected["missing_in_kafka"]
    assert result.doubled == expected["doubled"]
    for summary, want in zip(result.groups, expected["groups"]):
        assert summary.counts == want, (summary.group, shaped)
    missing = expected["missing_in_kafka"] + sum(g[MISSING] for g in expected["groups"])
    assert result.missing == missing
    assert result.exit_code == (1 if missing else 0)
    assert result.events == len(shaped)
    kinds = [f.kind for f in result.findings]
    assert kinds.count(MISSING) == missing
    assert all(f.fix for f in result.findings if f.kind == MISSING)
    for f in result.findings:
        if f.kind == MISSING and f.hop == "kafka":
            assert f.fix and f.fix.startswith("postbox db republish --since ")
        elif f.kind == MISSING:
            assert f.fix and f.fix.startswith(f"postbox replay --group {f.hop} --topic {TOPIC} --to ")


def _consumed_then_pending(fates: list[tuple[int, list[str], bool]]) -> list[tuple[int, list[str], bool]]:
    seen_pending = [False, False]
    out = []
    for n, per_group, retained in fates:
        groups = []
        for g, fate in enumerate(per_group):
            if n and seen_pending[g] and fate != "pending":
                fate = "pending"
            if n and fate == "pending":
                seen_pending[g] = True
            groups.append(fate if fate != "expired" else "missing")
        out.append((n, groups, retained))
    return out


@settings(max_examples=100, deadline=None)
@given(age=st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=20)))
def test_no_marker_past_the_ttl_is_unknown_never_missing_nor_applied(age: timedelta) -> None:
    """A record consumed with no marker: missing while a marker would still prove the apply,
    unknown (marker gone) once the record is older than the marker TTL."""
    created = NOW - age
    window = Window(created - timedelta(seconds=1), created + timedelta(seconds=1), NOW)
    eid = str(uuid.uuid4())
    copy = Copy(eid, TOPIC, 0, 5, int(created.timestamp() * 1000), created)
    group = GroupState("g", {(TOPIC, 0): 6}, {}, frozenset(), TTL)
    (summary,) = reconcile(window, OutboxState(None), [copy], [group]).groups
    want = MARKER_GONE if age >= TTL else MISSING
    assert summary.counts[want] == 1 and summary.counts[APPLIED] == 0


def test_an_evicting_redis_makes_every_absent_marker_unknown() -> None:
    created = NOW - timedelta(minutes=5)
    copy = Copy("e1", TOPIC, 0, 0, int(created.timestamp() * 1000), created)
    group = GroupState("g", {(TOPIC, 0): 1}, {}, frozenset(), TTL, eviction="maxmemory-policy allkeys-lru evicted 3 keys")
    result = reconcile(Window(created, NOW, NOW), OutboxState(None), [copy], [group])
    assert result.groups[0].counts[MARKER_GONE] == 1 and result.exit_code == 3 and result.unknown == 1
    (finding,) = result.findings
    assert "evicted 3 keys" in finding.last_seen and finding.fix and finding.fix.startswith("postbox trace e1")


def test_missing_outranks_unknown_in_the_exit_code() -> None:
    """1 (act: something is lost) wins over 3 (unproven), which wins over 0."""
    created = NOW - timedelta(minutes=5)
    ms = int(created.timestamp() * 1000)
    copies = [Copy("e1", TOPIC, 0, 0, ms, created), Copy("e2", TOPIC, 1, 0, ms, created)]
    evicting = GroupState("g", {(TOPIC, 0): 1}, {}, frozenset(), TTL, eviction="Redis evicted 3 key(s)")
    intact = GroupState("h", {(TOPIC, 1): 1}, {}, frozenset(), TTL)
    both = reconcile(Window(created, NOW, NOW), OutboxState(None), copies, [evicting, intact])
    assert (both.unknown, both.missing, both.exit_code) == (1, 1, 1)
    assert both.as_dict()["exit_code"] == 1 and both.as_dict()["unknown"] == 1


def test_a_doubled_event_applied_once_is_reported_and_not_missing() -> None:
    created = NOW - timedelta(minutes=5)
    ms = int(created.timestamp() * 1000)
    copies = [Copy("e1", TOPIC, 1, 7, ms, created), Copy("e1", TOPIC, 1, 9, ms + 5, created)]
    group = GroupState("g", {(TOPIC, 1): 10}, {"e1": b"1"}, frozenset(), TTL)
    result = reconcile(Window(created, NOW, NOW), OutboxState([Row("e1", "order", "o1", created)], created), copies, [group])
    assert result.doubled == 1 and result.records == 2 and result.exit_code == 0
    assert result.groups[0].doubled_applied_once == 1 and result.groups[0].counts[APPLIED] == 1
    (finding,) = result.findings
    assert finding.kind == "doubled" and finding.last_seen == f"{TOPIC}[1]@7, {TOPIC}[1]@9"


def test_retention_that_dropped_part_of_the_window_is_said() -> None:
    created = NOW - timedelta(minutes=5)
    copy = Copy("e1", TOPIC, 0, 0, int(created.timestamp() * 1000), created)
    outbox = OutboxState([], oldest_retained=NOW - timedelta(minutes=1))
    result = reconcile(Window(created - timedelta(minutes=1), NOW, NOW), outbox, [copy], [])
    assert result.retention_cut and result.missing_in_kafka == 0 and result.kafka_only == 1
    assert any("retention already dropped the rows created before" in n for n in result.notes)


def test_events_outside_the_window_are_left_out() -> None:
    early = SINCE - timedelta(seconds=1)
    copy = Copy("e0", TOPIC, 0, 0, int(early.timestamp() * 1000), early)
    result = reconcile(Window(SINCE, UNTIL, NOW), OutboxState([Row("e0", "order", "o", early)], early), [copy], [])
    assert result.events == 0 and result.exit_code == 0
