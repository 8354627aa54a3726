"""#14.2 per-node apply on Redis Cluster: the wave plan keeps each slot lane's and each order key's
events in input order, and a down node comes back when it answers a PING."""

from __future__ import annotations

import threading
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from postbox.effects.nodes import NodeHealth, Placement, plan_waves


def test_one_batch_is_one_wave_when_every_order_key_stays_on_one_node():
    places = [Placement(1, "a", "k1"), Placement(2, "b", "k2"), Placement(1, "a", "k1"), Placement(3, "c", None)]
    assert plan_waves(places) == [0, 0, 0, 0]


def test_an_order_key_moving_to_another_node_waits_for_the_next_wave_and_so_does_its_lane():
    places = [
        Placement(1, "a", "k"),  # wave 0
        Placement(2, "b", "k"),  # same key, other node: wave 1
        Placement(2, "b", None),  # same lane as the previous: not before it
        Placement(1, "a", "k"),  # back on a after a wave-1 event of k: wave 2
        Placement(5, "c", "other"),  # unrelated: wave 0
    ]
    assert plan_waves(places) == [0, 1, 1, 2, 0]


placement = st.builds(Placement, st.integers(0, 5), st.sampled_from("abc"), st.one_of(st.none(), st.integers(0, 3)))


@given(st.lists(placement, max_size=25))
@settings(max_examples=150, deadline=None)
def test_waves_never_reorder_a_lane_or_an_order_key(places):
    waves = plan_waves(places)
    for i, (first, w1) in enumerate(zip(places, waves)):
        for second, w2 in zip(places[i + 1 :], waves[i + 1 :]):
            same_lane = first.lane == second.lane
            same_key = first.order is not None and first.order == second.order
            if same_lane or same_key:
                assert w2 >= w1  # never sent before an earlier event of its lane or key
            if same_key and first.lane != second.lane:
                assert w2 > w1  # another lane (on any node): only after the earlier one's wave is known


def test_an_order_key_on_two_slots_of_one_node_goes_wave_by_wave():
    """Found by a review with MONITOR: two slots of one master in one wave go out as one call per
    slot lane, lane by lane, so an order key's events in slots 1, 2, 1 ran as e0 e2, then e1.
    Before the fix all three were in wave 0 (only another *node* moved an event to a later wave)."""
    places = [Placement(1, "a", "k"), Placement(2, "a", "k"), Placement(1, "a", "k"), Placement(2, "a", None)]
    assert plan_waves(places) == [0, 1, 2, 1]


def test_a_down_node_is_up_again_once_a_ping_answers():
    health = NodeHealth(probe_interval_s=0.01)
    answers = threading.Event()

    def ping() -> None:
        if not answers.is_set():
            raise ConnectionError("refused")

    health.mark_down("n1:7000", "Connection refused", ping)
    health.mark_down("n1:7000", "again", ping)  # one probe per node
    assert health.error("n1:7000") == "Connection refused" and health.any_down()
    assert not health.take_recovered()
    answers.set()
    deadline = time.monotonic() + 10
    while health.error("n1:7000") is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert health.error("n1:7000") is None and not health.any_down()
    assert health.take_recovered() and not health.take_recovered()


def test_a_forgotten_node_is_up_and_no_longer_probed():
    """A dead master whose replica took over its slots: forgotten, it holds nothing back and its
    probe stops PINGing it (it would never answer)."""
    health = NodeHealth(probe_interval_s=0.01)
    pings = []

    def ping() -> None:
        pings.append(1)
        raise ConnectionError("refused")

    health.mark_down("n1:7000", "Connection refused", ping)
    deadline = time.monotonic() + 10
    while not pings and time.monotonic() < deadline:
        time.sleep(0.01)
    health.forget(["n1:7000", "n2:7001"])  # a node that was not down is ignored
    assert health.error("n1:7000") is None and not health.any_down()
    time.sleep(0.1)  # the probe sees it was forgotten at its next turn
    seen = len(pings)
    time.sleep(0.2)
    assert len(pings) == seen
    assert not health.take_recovered()  # forgotten is not recovered: the node did not come back
