"""Failure texts and log lines are writable as UTF-8 whatever the event's data holds: a lone
surrogate (``"\\ud83d"``, which JSON allows and JavaScript writes) in a handler's error raised
UnicodeEncodeError in the failure stream's XADD, the DLQ headers and the log line. Properties over
any text, surrogates included."""

from __future__ import annotations

import json
import logging

from hypothesis import given
from hypothesis import strategies as st

from postbox.consumer.dlq_record import Failure, dlq_headers, one_line
from postbox.consumer.logs import JsonFormatter, TextFormatter
from postbox.safe_text import safe_text

#: Any text, lone surrogates included (hypothesis's characters() never draws them).
ANY_TEXT = st.text(alphabet=st.one_of(st.characters(), st.integers(0xD800, 0xDFFF).map(chr)))


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@given(ANY_TEXT)
def test_safe_text_is_writable_and_changes_only_what_could_not_be(text):
    out = safe_text(text)
    assert _encodable(out)
    assert (out == text) == _encodable(text)
    if not _encodable(text):
        assert out.count("\\u") >= sum(0xD800 <= ord(c) <= 0xDFFF for c in text)  # each one kept as its escape


@given(ANY_TEXT)
def test_a_failure_quoting_any_text_makes_dlq_headers_and_a_one_line_error(text):
    failure = Failure("handler_error", f"unknown customer {text}")
    assert _encodable(failure.error) and _encodable(one_line(text))
    headers = dlq_headers([("id", b"e-1")], failure, topic="outbox.event.order", partition=0, offset=7, group="g")
    assert all(isinstance(v, bytes) for _, v in headers)


@given(ANY_TEXT)
def test_log_lines_quoting_any_text_are_writable_and_json_stays_json(text):
    record = logging.LogRecord("shop", logging.WARNING, "", 0, "refusing %s", (text,), None)
    line = JsonFormatter().format(record)
    assert _encodable(line) and json.loads(line)["msg"].startswith("refusing ")
    assert _encodable(TextFormatter().format(record))


def test_the_escape_reads_back_as_the_original_in_json():
    record = logging.LogRecord("shop", logging.WARNING, "", 0, "name %s", ("Zo\ud83d",), None)
    assert json.loads(JsonFormatter().format(record))["msg"] == "name Zo\ud83d"
