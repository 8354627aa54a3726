"""The writer's deliverability check: every rule refuses before any SQL, naming the field and the limit.

A row the connector cannot publish stops every event behind it in the WAL, so the writer refuses
it first (postbox.outbox.deliverable); the database's domains apply the same numbers to other
writers (tests/integration/test_deliverable_rules.py keeps the two in step, on PostgreSQL). Here
the writer alone, without a database: each emit is given a connection that must not be touched
(``object()``: any use raises AttributeError), so a refusal is shown to come before any SQL.
Each rule at its limit and one past it, in the general path and in the fast path of an event
type already emitted (only the key is checked there), and NUL and lone surrogates anywhere in a
text field. (Hypothesis's ``st.characters()`` draws no surrogates unless asked: they come from an
explicit range of code points.)
"""

from __future__ import annotations

import psycopg

import uuid
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from postbox.errors import PayloadError, TraceContextError
from postbox.outbox import NewEvent, Outbox
from postbox.outbox.deliverable import MAX_AGGREGATE_TYPE, MAX_EVENT_TYPE, MAX_KEY_BYTES, MAX_TRACEPARENT_BYTES

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
class _Untouched(psycopg.Connection):  # type: ignore[type-arg]
    """A psycopg connection type (what the writer accepts) with no connection behind it: any
    use raises (its pgconn was never made), so nothing can be sent on it."""

    def __init__(self) -> None:  # no super().__init__: no server, no socket
        pass

    def __getattr__(self, name: str) -> object:
        raise AttributeError(f"nothing may be sent on this connection ({name})")


UNTOUCHED: object = _Untouched.__new__(_Untouched)  # a connection nothing may be sent on
ORDER = {"order_id": "o-1", "customer_id": "c-1", "items": [], "total_cents": 0, "placed_at": 0}
#: A valid W3C traceparent of a future version (which may carry more fields), before its extra field.
TRACE_HEAD = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-"


def emit(outbox: Outbox, aggregate_type: str, aggregate_id: object, event_type: str, **options: object) -> None:
    outbox.emit(UNTOUCHED, aggregate_type, aggregate_id, event_type, {"n": 1}, **options)  # type: ignore[arg-type]


def refusal(aggregate_type: str, aggregate_id: object, event_type: str) -> PayloadError:
    with pytest.raises(PayloadError) as info:
        emit(Outbox(encoding="json"), aggregate_type, aggregate_id, event_type)
    return info.value


def accepted(aggregate_type: str, aggregate_id: object, event_type: str, **options: object) -> None:
    """Passes every rule: the emit gets as far as the connection (which it may not touch here)."""
    with pytest.raises(AttributeError):
        emit(Outbox(encoding="json"), aggregate_type, aggregate_id, event_type, **options)


def assert_names(error: PayloadError, field: str, *parts: str) -> None:
    message = str(error)
    assert error.field == field and field in message, message
    for part in parts:
        assert part in message, (part, message)
    message.encode("utf-8")  # printable and loggable, whatever the value held
    assert "\x00" not in message
    assert error.fix is not None and "nothing was written" in error.fix


# -- aggregate_type: it names the topic --------------------------------------------------------------


def test_an_aggregate_type_at_its_limit_is_accepted_one_past_it_is_refused_naming_both_limits() -> None:
    accepted("t" * MAX_AGGREGATE_TYPE, "k", "E")
    error = refusal("t" * (MAX_AGGREGATE_TYPE + 1), "k", "E")
    assert_names(error, "aggregate_type", f"{MAX_AGGREGATE_TYPE + 1} characters", "249-character limit", f"at most {MAX_AGGREGATE_TYPE}")


@pytest.mark.parametrize("bad", ["order items", "order/x", "bestellung-ä", "a:b", "tab\there"])
def test_an_aggregate_type_with_a_character_kafka_refuses_in_a_topic_name_is_refused(bad: str) -> None:
    error = refusal(bad, "k", "E")
    assert_names(error, "aggregate_type", "letters, digits, '.', '_' and '-'", "which Kafka refuses")


def test_an_empty_aggregate_type_is_refused() -> None:
    assert_names(refusal("", "k", "E"), "aggregate_type", "non-empty string")


# -- aggregate_id: the Kafka key ---------------------------------------------------------------------


@pytest.mark.parametrize(("key", "size"), [("k" * MAX_KEY_BYTES, MAX_KEY_BYTES), ("é" * (MAX_KEY_BYTES // 2), MAX_KEY_BYTES)],
                         ids=["ascii", "two-byte"])
def test_a_key_at_the_byte_limit_is_accepted_one_byte_more_is_refused(key: str, size: int) -> None:
    accepted("t", key, "E")
    longer = key + "k"
    error = refusal("t", longer, "E")
    assert_names(error, "aggregate_id", f"{size + 1:,} bytes", f"{MAX_KEY_BYTES:,}-byte key limit")


def test_the_key_limit_counts_utf8_bytes_not_characters() -> None:
    key = "😀" * (MAX_KEY_BYTES // 4 + 1)  # 1,025 characters, 4,100 bytes
    assert_names(refusal("t", key, "E"), "aggregate_id", "4,100 bytes")


@pytest.mark.parametrize("key", ["", None, True, 3.5, b"bytes"])
def test_a_key_that_is_not_a_non_empty_string_int_or_uuid_is_refused(key: object) -> None:
    assert_names(refusal("t", key, "E"), "aggregate_id", "non-empty string")


def test_a_missing_key_beside_a_bad_type_still_makes_a_printable_message() -> None:
    """The key is checked first; the message shows the type and the event type it came with."""
    assert_names(refusal("a\ud83d", None, "E\x00"), "aggregate_id", "non-empty string")


@pytest.mark.parametrize("key", [42, uuid.UUID(int=7)])
def test_an_int_or_uuid_key_is_its_string(key: object) -> None:
    accepted("t", key, "E")


# -- event_type: a header ----------------------------------------------------------------------------


def test_an_event_type_at_its_limit_is_accepted_one_past_it_is_refused() -> None:
    accepted("t", "k", "E" * MAX_EVENT_TYPE)
    error = refusal("t", "k", "E" * (MAX_EVENT_TYPE + 1))
    assert_names(error, "event_type", f"{MAX_EVENT_TYPE + 1} characters", f"{MAX_EVENT_TYPE}-character limit")


def test_an_empty_event_type_is_refused() -> None:
    assert_names(refusal("t", "k", ""), "event_type", "non-empty string")


# -- traceparent: a header ---------------------------------------------------------------------------


def test_a_traceparent_at_its_limit_is_accepted_one_byte_more_is_refused_before_any_sql() -> None:
    """The database refuses a traceparent over 512 bytes (its domain): the writer must refuse it
    first, or the caller's whole transaction is aborted by a CheckViolation naming no argument."""
    at_limit = TRACE_HEAD + "a" * (MAX_TRACEPARENT_BYTES - len(TRACE_HEAD))
    accepted("t", "k", "E", traceparent=at_limit)
    for way in ("emit", "emit_many"):
        with pytest.raises(TraceContextError) as info:
            outbox = Outbox(encoding="json")
            if way == "emit":
                emit(outbox, "t", "k", "E", traceparent=at_limit + "a")
            else:
                outbox.emit_many(UNTOUCHED, [NewEvent("t", "k", "E", {"n": 1}, traceparent=at_limit + "a")])  # type: ignore[arg-type]
        message = str(info.value)
        assert "traceparent" in message and f"{MAX_TRACEPARENT_BYTES + 1} bytes" in message and f"at most {MAX_TRACEPARENT_BYTES}" in message


# -- NUL and lone surrogates, in every text field -----------------------------------------------------

LEGAL = st.text(st.sampled_from("abcXYZ019._-"), max_size=6)
NUL_OR_SURROGATE = st.one_of(st.just("\x00"), st.integers(0xD800, 0xDFFF).map(chr))
BAD = st.builds(lambda before, bad, after: (before + bad + after, len(before)), LEGAL, NUL_OR_SURROGATE, LEGAL)


@given(bad=BAD, field=st.sampled_from(["aggregate_type", "aggregate_id", "event_type"]))
def test_nul_and_lone_surrogates_are_refused_naming_the_field_with_a_printable_message(bad: tuple[str, int], field: str) -> None:
    text, index = bad
    fields = {"aggregate_type": "t", "aggregate_id": "k", "event_type": "E", field: text}
    error = refusal(fields["aggregate_type"], fields["aggregate_id"], fields["event_type"])
    assert_names(error, field)
    if field != "aggregate_type":  # the type's alphabet refuses both already; the others say which and where
        what = "a NUL character" if text[index] == "\x00" else "a lone surrogate"
        assert what in str(error) and f"at index {index}" in str(error)


# -- the fast path of an event type already emitted -----------------------------------------------------


@pytest.mark.parametrize("key", ["k" * (MAX_KEY_BYTES + 1), "é" * (MAX_KEY_BYTES // 2 + 1), "a\x00b", "a\ud83d", "\udfff"],
                         ids=["ascii-long", "two-byte-long", "nul", "surrogate", "only-a-surrogate"])
def test_a_known_event_type_still_has_every_key_checked(key: str) -> None:
    """After one good emit of order/OrderPlaced the writer checks only the key (and the payload);
    every key rule still holds there."""
    outbox = Outbox(schemas_dir=SCHEMAS)
    with pytest.raises(AttributeError):  # a good emit: the type is remembered, then the connection is reached
        outbox.emit(UNTOUCHED, "order", "o-1", "OrderPlaced", ORDER)  # type: ignore[arg-type]
    with pytest.raises(PayloadError) as info:
        outbox.emit(UNTOUCHED, "order", key, "OrderPlaced", ORDER)  # type: ignore[arg-type]
    assert_names(info.value, "aggregate_id")


@pytest.mark.parametrize("way", ["emit_many", "execute_and_emit"])
def test_every_way_to_emit_refuses_before_any_sql(way: str) -> None:
    outbox = Outbox(encoding="json")
    with pytest.raises(PayloadError) as info:
        if way == "emit_many":
            outbox.emit_many(UNTOUCHED, [NewEvent("t", "k", "E", {"n": 0}), NewEvent("t", "k" * (MAX_KEY_BYTES + 1), "E", {"n": 1})])  # type: ignore[arg-type]
        else:
            outbox.execute_and_emit(UNTOUCHED, "SELECT 1", None, "t", "k", "E\x00", {"n": 1})  # type: ignore[arg-type]
    assert info.value.field == ("aggregate_id" if way == "emit_many" else "event_type")
