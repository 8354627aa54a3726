"""reconcile's SCAN fallback on a real redis-server: a marker under a tag no record tells (a
handler's own routing key) is found, another group's marker of the same event never is."""

from __future__ import annotations

from postbox.effects.keys import KeyLayout
from postbox.incident.reconcile_read import scan_markers
from postbox.testing.server import RedisServer

EID = "0193a5c0-0000-7000-8000-000000000001"


def test_the_groups_marker_under_any_tag_is_found_and_only_its_own() -> None:
    with RedisServer() as server:
        client = server.client()
        mine, other, prefix = (KeyLayout("postbox", g, slot_aligned=False) for g in ("billing", "billing2", "bill"))
        client.set(mine.marker(EID.encode(), b"customer:c7"), b"1")
        client.set(other.marker(b"0193a5c0-0000-7000-8000-000000000002", b"customer:c7"), b"1")
        client.set(prefix.marker(b"0193a5c0-0000-7000-8000-000000000003", b"x"), b"1")
        wanted = [EID, "0193a5c0-0000-7000-8000-000000000002", "0193a5c0-0000-7000-8000-000000000003"]
        found, searched = scan_markers(client, "billing", wanted, max_keys=1000)
        assert searched and found == {EID: b"1"}
        assert scan_markers(client, "billing", wanted, max_keys=2) == ({}, False), "a Redis above the bound is not scanned"
