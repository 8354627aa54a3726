"""Per-node apply on Redis Cluster: which events may go out together, and which nodes are down.

Why: on a cluster each master serves its own slots, so one master that stops answering should hold
back only the events whose slots live on it. The engine sends each node's script calls from its own
thread, in parallel; this module holds the two small pieces of state that decides around that:

- :func:`plan_waves`: events go out in *waves*. Within a wave every node's calls run in parallel,
  and the events of one hash-slot lane (and of one order key, e.g. one Kafka key of one partition)
  keep their input order: a lane's calls go to its node one after the other. A node sends a wave's
  calls lane by lane (each call holds one slot's events), so an event whose order key already has
  an earlier event in *another* lane, on this node or another, waits for the next wave: it is sent
  only once that earlier event is known applied (most batches are one wave: an aggregate's events
  share its routing tag, hence its slot).
- :class:`NodeHealth`: a node whose calls failed with a connection error or gave no reply within
  the engine's node wait is *down*: events for it come back as retries at once, without a network
  wait, so a stopped master costs the other nodes one wait, not one per batch. A background thread
  PINGs it; the first answer brings it back. A down master that the cluster replaced (its replica
  promoted: the slot map names another node for its slots) is *forgotten*: its events go to the
  new master, and nothing waits for the dead one any more.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Callable

log = logging.getLogger("postbox.effects")

#: Pause between two PINGs of a down node (each PING waits up to the client's socket timeout).
PROBE_INTERVAL_S = 0.2


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one event goes: its hash-slot lane, its node, and its order key (None: none)."""

    lane: int
    node: str
    order: Hashable | None = None


def plan_waves(placements: Sequence[Placement]) -> list[int]:
    """The wave of each event (0-based, in input order; see the module docs).

    An event goes in the wave of the previous event of its lane, and of its order key when that
    event is in the same lane; in the next wave when the order key's previous event is in another
    lane (on any node: a node runs a wave's calls lane by lane, not event by event); never in an
    earlier wave than any previous event of its lane or order key, so each keeps its input order."""
    last: dict[tuple[str, Hashable], tuple[int, int]] = {}
    waves: list[int] = []
    for place in placements:
        wave = 0
        keys: list[tuple[str, Hashable]] = [("lane", place.lane)]
        if place.order is not None:
            keys.append(("order", place.order))
        for key in keys:
            seen = last.get(key)
            if seen is not None:
                wave = max(wave, seen[0] if seen[1] == place.lane else seen[0] + 1)
        for key in keys:
            last[key] = (wave, place.lane)
        waves.append(wave)
    return waves


class NodeHealth:
    """The nodes known down, each with the error that put it down; thread-safe."""

    def __init__(self, probe_interval_s: float = PROBE_INTERVAL_S) -> None:
        self._lock = threading.Lock()
        self._down: dict[str, str] = {}
        self._recovered = False
        self.probe_interval_s = probe_interval_s

    def error(self, node: str) -> str | None:
        """Why ``node`` is down, or None when it is up."""
        with self._lock:
            return self._down.get(node)

    def down_nodes(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._down)

    def any_down(self) -> bool:
        with self._lock:
            return bool(self._down)

    def take_recovered(self) -> bool:
        """True once after a node came back (its configuration may have changed meanwhile)."""
        with self._lock:
            recovered, self._recovered = self._recovered, False
            return recovered

    def forget(self, nodes: Iterable[str]) -> None:
        """``nodes`` serve no slot any more (their replicas took over): no longer down, no longer PINGed."""
        with self._lock:
            gone = [n for n in nodes if self._down.pop(n, None) is not None]
        for node in gone:
            log.warning("Redis node %s serves no slot any more (a replica took over): its events go to the new master", node)

    def mark_down(self, node: str, error: str, ping: Callable[[], Any]) -> None:
        """Put ``node`` down and start PINGing it (``ping`` raises while it is unreachable)."""
        with self._lock:
            if node in self._down:
                return
            self._down[node] = error
        log.warning("Redis node %s is down (%s): its events are retried when it answers again", node, error)
        threading.Thread(target=self._probe, args=(node, ping), name=f"postbox-probe-{node}", daemon=True).start()

    def _probe(self, node: str, ping: Callable[[], Any]) -> None:
        while True:
            time.sleep(self.probe_interval_s)
            with self._lock:
                if node not in self._down:
                    return  # forgotten: replaced by a promoted replica
            try:
                ping()
            except Exception as exc:  # noqa: BLE001 - any failure means still down
                log.debug("Redis node %s still down: %s", node, exc)
                continue
            with self._lock:
                self._down.pop(node, None)
                self._recovered = True
            log.warning("Redis node %s answers again", node)
            return
