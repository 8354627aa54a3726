"""What a static member does when the broker fences it (``FENCED_INSTANCE_ID``): rejoin, or stop.

Two causes look the same from the fenced member's side:

- the group coordinator restarted or moved (a broker SIGKILL, a leader change of
  ``__consumer_offsets``) and answers the member's next commit or heartbeat with
  ``FENCED_INSTANCE_ID`` although no other process uses its name (seen in the fault suite's Kafka
  SIGKILL scenario). librdkafka reports it as a fatal error: the client is unusable, but a new
  client under the same instance id joins and gets the partitions back;
- another live process really uses the same instance id (a name set twice by hand, containers
  sharing a host name). Rejoining then fences the other process, which rejoins and fences this
  one again: they would take the partitions from each other forever.

So the first fence within :data:`WINDOW_S` is answered with a rejoin (a new client, same instance
id, resuming from the committed offsets: whatever the old client had applied but not committed
comes back as duplicates the markers absorb), and a second fence within the window by the *same*
group coordinator stops the member with the configuration error naming the instance id. A second
fence by another coordinator is explained by the move (on a cluster of several brokers a leader
kill and a coordinator kill minutes apart, or the coordinator moving back to a restarted broker,
fence a member twice), so it rejoins too, up to :data:`MAX_REJOINS` within the window. With a
real duplicate one of the two processes stops after a few extra rebalances and the other keeps the
partitions.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from confluent_kafka import KafkaError

#: A second fence within this many seconds of the rejoin means another process uses the name.
WINDOW_S = 300.0
#: Rejoins within the window after which any fence stops the member, coordinator moves or not.
MAX_REJOINS = 3


class FenceAction(enum.Enum):
    REJOIN = "rejoin"
    STOP = "stop"


@dataclass
class FencePolicy:
    """Decides, per fence, whether to rejoin or stop (see the module docs). Pure: ``now`` is given."""

    window_s: float = WINDOW_S
    max_rejoins: int = MAX_REJOINS
    _rejoins: list[tuple[float, int | None]] = field(default_factory=list)

    def on_fence(self, now: float, coordinator: int | None = None) -> FenceAction:
        """The action for a fence seen at monotonic time ``now``; ``coordinator``: the broker id of
        the group's coordinator then (None: unknown, taken for the same one as before)."""
        recent = [(at, seen) for at, seen in self._rejoins if now - at < self.window_s]
        if recent:
            last = recent[-1][1]
            moved = coordinator is not None and last is not None and coordinator != last
            if not moved or len(recent) >= self.max_rejoins:
                return FenceAction.STOP
        self._rejoins = [*recent, (now, coordinator)]
        return FenceAction.REJOIN


def is_fence(err: KafkaError, fatal: bool) -> bool:
    """FENCED_INSTANCE_ID, or librdkafka's fatal error it turns into (its text names the fence)."""
    return err.code() == KafkaError.FENCED_INSTANCE_ID or (fatal and "fenced" in err.str().lower())
