"""#12.13: one event-id rule for the consumer, trace and dlq; #12.14: JSON payloads held to their
event's Avro schema (wrong types refused naming the field, defaults filled, unknown fields dropped)."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from postbox.codec.json_conform import conform
from postbox.codec.validate import Invalid
from postbox.ids import event_id_problem, is_event_id, parse_event_id
from postbox.schemas.repository import EventSchema

SCHEMA = EventSchema.from_json("invoice", "InvoiceIssued", 1, {
    "type": "record", "name": "InvoiceIssued",
    "fields": [
        {"name": "due_days", "type": "int"},
        {"name": "currency", "type": "string", "default": "EUR"},
        {"name": "coupon", "type": ["null", "string"], "default": None},
        {"name": "lines", "type": {"type": "array", "items": {"type": "record", "name": "Line", "fields": [
            {"name": "sku", "type": "string"}, {"name": "qty", "type": "int", "default": 1}]}}, "default": []},
    ],
})


@given(st.uuids())
def test_every_uuid_is_an_event_id_in_every_typed_form(value: uuid.UUID):
    assert is_event_id(str(value))
    for typed in (str(value).upper(), f" {value} ", value.hex, "{" + str(value) + "}"):
        assert parse_event_id(typed) == str(value)


@given(st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=200))
def test_printable_ascii_keys_are_ids_used_exactly_as_they_arrive(text: str):
    assert is_event_id(text) and event_id_problem(text) is None
    assert parse_event_id(text) == text or uuid.UUID(text)  # only UUID spellings are tidied


@given(st.text(max_size=210) | st.text(alphabet=st.characters(max_codepoint=0x80), max_size=210))
@example("~" * 200)
@example("!" * 201)
@example("a\x7fb")
def test_an_event_id_is_one_to_200_characters_from_bang_to_tilde(text: str):
    """#14.2: the rule as the module states it, for any text (is_event_id is now C string checks,
    not a regular expression: shown to fail with the space test left out and with ``< 200``)."""
    rule = 1 <= len(text) <= 200 and all("!" <= ch <= "~" for ch in text)
    assert is_event_id(text) == rule
    assert (event_id_problem(text) is None) == rule


@pytest.mark.parametrize("bad, why", [("", "empty"), ("a b", "' '"), ("caf\u00e9", "'é'"), ("x" * 201, "201 characters"), ("a\x01b", "'\\x01'")])
def test_what_is_not_an_event_id_says_why(bad: str, why: str):
    assert not is_event_id(bad)
    assert why in event_id_problem(bad)
    with pytest.raises(ValueError, match="not an event id"):
        parse_event_id(bad if bad.strip() else "")


def test_a_conforming_json_payload_gets_defaults_and_loses_unknown_fields():
    got = conform(SCHEMA, {"due_days": 14, "lines": [{"sku": "a"}], "added_later": True})
    assert got == {"due_days": 14, "currency": "EUR", "coupon": None, "lines": [{"sku": "a", "qty": 1}]}


@pytest.mark.parametrize("payload, path, problem", [
    ({"due_days": "fourteen"}, "due_days", "expected int, got str"),
    ({}, "due_days", "is missing"),
    ({"due_days": 2**40}, "due_days", "out of range"),
    ({"due_days": 1, "coupon": 5}, "coupon", "fits none"),
    ({"due_days": 1, "lines": [{"sku": 3}]}, "lines[0].sku", "expected string"),
])
def test_a_json_payload_that_does_not_fit_names_the_field(payload, path, problem):
    with pytest.raises(Invalid) as caught:
        conform(SCHEMA, payload)
    assert caught.value.path == path and problem in caught.value.problem
