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
