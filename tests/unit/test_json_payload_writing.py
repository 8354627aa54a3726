"""Review of the writer's JSON encoding (``Outbox(encoding="json")``, for topics read by tools other
than postbox): what it writes must be JSON those tools parse, and what it cannot write is refused
before any SQL, naming the field. Found by review: NaN and Infinity were written as ``NaN`` (not
JSON: jq, Jackson and JSON.parse refuse the record), a set or bytes became Python's repr text
(``"{1, 2}"``, ``"b'..'"``: data silently changed), and a lone surrogate raised a bare
UnicodeEncodeError naming nothing."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timezone
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from postbox.errors import PayloadError
from postbox.outbox.rows import RowFactory

ROWS = RowFactory(encoding="json")


def _body(payload: dict) -> bytes:
    """The payload column of the row an emit would write (the row's only bytes parameter)."""
    row = ROWS.prepare("thing", "k", "Happened", payload)
    return next(p for p in row.params if isinstance(p, bytes))


@pytest.mark.parametrize(("payload", "field"), [
    ({"reading": {"value": float("nan")}}, "reading.value"),
    ({"limits": [1.0, float("inf")]}, "limits[1]"),
    ({"tags": {"a", "b"}}, "tags"),
    ({"raw": b"\x00\x01"}, "raw"),
    ({"name": "\ud800"}, "name"),
])
def test_a_value_json_cannot_carry_is_refused_naming_the_field(payload: dict, field: str) -> None:
    with pytest.raises(PayloadError) as info:
        _body(payload)
    assert info.value.field == field and field in str(info.value)


def test_the_values_written_as_text_stay_as_before() -> None:
    when = datetime(2024, 5, 6, 7, 8, 9, tzinfo=timezone.utc)
    ident = uuid.UUID(int=7)
    body = _body({"at": when, "id": ident, "amount": Decimal("1.10"), "n": 1, 2: "int key"})
    assert json.loads(body) == {"at": str(when), "id": str(ident), "amount": "1.10", "n": 1, "2": "int key"}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3), max_leaves=10)


@given(st.dictionaries(st.text(), json_values, max_size=4))
def test_what_is_written_is_strict_json_that_reads_back_the_same(payload: dict) -> None:
    text = _body(payload).decode("utf-8")
    assert json.loads(text, parse_constant=lambda c: pytest.fail(f"not JSON: {c}")) == payload
