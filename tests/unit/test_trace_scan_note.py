"""`postbox trace`: a marker SCAN cut short is said on the group's line, after its status.

The note was set on the group's summary and then overwritten by the status line, so an on-call
engineer never learnt that "no marker" meant "not found in the keys scanned"."""

from __future__ import annotations

import time
from datetime import timedelta
from types import SimpleNamespace

from postbox.incident.trace import _trace_group


class _Kafka:
    def describe_group(self, group):
        return SimpleNamespace(state="STABLE", members=[object()])

    def watermarks(self, topic, partitions):
        return {p: (0, 10) for p in partitions}


class _Redis:
    def find_marker(self, group, event_id, anchors):
        return None

    def scan_marker(self, group, event_id, *, progress=None):
        return None, 2_000_000, False

    def failures(self, group, event_id, anchors):
        return []


def test_a_scan_cut_short_stays_on_the_group_line():
    rec = SimpleNamespace(topic="outbox.event.order", partition=0, offset=3, timestamp_ms=int(time.time() * 1000),
                          meta=SimpleNamespace(event_id="0191d6b2-7c3e-7000-8000-000000000001"))
    g = _trace_group("billing", rec, _Kafka(), _Redis(), {0: 5}, [], [], timedelta(days=8), True,
                     lambda _label: (lambda _done, _total: None))
    assert g.consumed and g.marker is None
    assert g.summary.endswith("(marker SCAN stopped after 2,000,000 keys)"), g.summary
    assert len(g.summary) > len("(marker SCAN stopped after 2,000,000 keys)")  # the status line comes first
