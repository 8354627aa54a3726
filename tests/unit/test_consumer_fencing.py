"""#14.3 a fenced static member rejoins once (a coordinator restart fences a member no other process
shares a name with) and stops when fenced again soon (another live process uses its name)."""

from __future__ import annotations

from postbox.consumer.fencing import WINDOW_S, FenceAction, FencePolicy


def test_the_first_fence_rejoins():
    assert FencePolicy().on_fence(100.0) is FenceAction.REJOIN


def test_a_second_fence_within_the_window_stops():
    policy = FencePolicy()
    assert policy.on_fence(100.0) is FenceAction.REJOIN
    assert policy.on_fence(100.0 + WINDOW_S - 1) is FenceAction.STOP


def test_fences_further_apart_than_the_window_each_rejoin():
    """Broker restarts hours apart are not a duplicate name: each is answered by a rejoin."""
    policy = FencePolicy()
    for at in (0.0, WINDOW_S + 1, 2 * WINDOW_S + 2, 5 * WINDOW_S):
        assert policy.on_fence(at) is FenceAction.REJOIN


def test_a_second_fence_after_the_coordinator_moved_rejoins():
    """A leader kill and then a coordinator kill minutes apart (or the coordinator moving back to a
    restarted broker) fence a member twice within the window: the coordinator that fenced it is
    another one each time, which no duplicate name explains."""
    policy = FencePolicy()
    assert policy.on_fence(100.0, coordinator=3) is FenceAction.REJOIN
    assert policy.on_fence(160.0, coordinator=1) is FenceAction.REJOIN


def test_a_second_fence_by_the_same_coordinator_stops():
    policy = FencePolicy()
    assert policy.on_fence(100.0, coordinator=2) is FenceAction.REJOIN
    assert policy.on_fence(130.0, coordinator=2) is FenceAction.STOP


def test_a_fence_whose_coordinator_is_unknown_counts_as_the_same_coordinator():
    policy = FencePolicy()
    assert policy.on_fence(100.0, coordinator=2) is FenceAction.REJOIN
    assert policy.on_fence(130.0, coordinator=None) is FenceAction.STOP


def test_rejoins_within_the_window_are_bounded_even_when_the_coordinator_keeps_moving():
    """Two processes sharing a name while the coordinator moves around still stop eventually."""
    policy = FencePolicy()
    actions = [policy.on_fence(100.0 + i, coordinator=i % 3) for i in range(6)]
    assert actions[:3] == [FenceAction.REJOIN] * 3 and FenceAction.STOP in actions
