"""A fault run whose Redis is a replicated topology of its own: a primary, a replica and three
Sentinels (tests/support/replicated_redis.py), reached by the consumer through a
``redis+sentinel://`` URL. PostgreSQL, Debezium and Kafka are the shared stack's, untouched: the
run kills only processes it started, so it is not ``disruptive``.

:meth:`RedisFailoverRun.kill_primary` SIGKILLs the primary under load and measures what the fault
suite measures (recovery: kill → the first event committed after the kill applied), plus which
node died and which took over. ``hold_replica`` first opens the window asynchronous replication
leaves, deterministically: the replica is stopped (SIGSTOP) and the replication link is filled
with filler writes until the kernel's socket buffers are full, so every apply after that sits in
the primary's own output buffer, which dies with it. Whether those applies were committed is the
replica wait's job (``--redis-replicas``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import redis

from tests.faults.harness import FaultRun, Kill
from tests.support.replicated_redis import Topology

#: Filler written while the replica is held, in values of this size, until the link is full.
FILLER_VALUE = b"f" * 65_536


@dataclass(frozen=True)
class Held:
    """What happened while the replica was held back, before the primary was killed."""

    filler_bytes: int
    #: Events applied on the primary alone (their replication behind the filler).
    applied: int
    #: Of the records produced after the filler, how many the group committed.
    committed: int
    #: Replication stream the primary held in its own memory at the kill (lost with it).
    out_buffer: int

    def describe(self) -> str:
        return (f"replica held back (SIGSTOP), its link filled with {self.filler_bytes / 1e6:.1f} MB; then {self.applied} events "
                f"applied on the primary alone and {self.committed} records past the filler committed; "
                f"{self.out_buffer / 1e6:.2f} MB of replication stream in the primary's output buffer at the kill, never sent")


class RedisFailoverRun(FaultRun):
    """A :class:`FaultRun` on a private primary + replica + 3 Sentinels (see the module docs).

    ``replicas``: the consumer's ``POSTBOX_REDIS_REPLICAS`` (default: unset, i.e. ``auto``)."""

    def __init__(self, scenario: str, tmp: Path, *, replicas: str | None = None, log: Callable[[str], None] = print, **kwargs: Any) -> None:
        self.topology = Topology().start()
        try:
            env = {"POSTBOX_REDIS_URL": self.topology.url, **({"POSTBOX_REDIS_REPLICAS": replicas} if replicas is not None else {})}
            super().__init__(scenario, tmp, log=log, consumer_env={**env, **kwargs.pop("consumer_env", {})},
                             redis_client=self.topology.admin(), restore_stack=False, **kwargs)
        except BaseException:
            self.topology.stop()
            raise
        #: What the last ``kill_primary(hold_replica=True)`` saw.
        self.held: Held | None = None
        self.log(f"   [{scenario}] Redis: primary 127.0.0.1:{self.topology.primary.port}, replica "
                 f"127.0.0.1:{self.topology.replicas[0].port}, Sentinels {', '.join(str(s.port) for s in self.topology.sentinels)}")

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.topology.stop()

    def kill_primary(self, *, hold_replica: bool = False) -> Kill:
        """SIGKILL the primary right after an ack (with ``hold_replica``: after the applies that
        the replica could not have), wait for the Sentinels to promote the replica, and record the
        recovery and the evidence."""
        old = self.topology.current_primary()
        replica = self.topology.replicas[0]
        note = "SIGKILL right after an ack"
        held = self.held = self._hold(replica) if hold_replica else None
        if held is None:
            base = self.applied_count()
            self.wait(lambda: self.applied_count() > base, 60, "an apply acknowledged", interval=0.005)
        else:
            note = "SIGKILL, replica held back"
        before = self._signals()
        at = time.monotonic()
        old.kill()
        self.topology.resume(replica)
        promoted = self.topology.wait_promoted(old.port)
        promoted_s = time.monotonic() - at
        kill = self._record("redis", note, at, promoted_s)
        after = self._signals()
        self.evidence.append(
            f"primary 127.0.0.1:{old.port} SIGKILLed; the Sentinels promoted the replica 127.0.0.1:{promoted.port} "
            f"{promoted_s:.1f} s later; the consumer paused {after['pauses'] - before['pauses']} time(s) on a transient "
            f"Redis failure and went on on the promoted primary through {self.topology.url.split('://')[0]}://"
        )
        if held is not None:
            self.evidence.append(held.describe())
        return kill

    def _hold(self, replica: Any) -> Held:
        """Stop the replica, fill the link, then let the consumer apply: what was at risk."""
        primary = self.topology.current_primary().client(socket_timeout=10)
        try:
            self.topology.pause(replica)
            filler = _fill_link(primary)
            ends = self.topic_ends()  # every record past these is applied after the filler: in the primary's buffer
            base = self.applied_count()
            self.wait(lambda: self.applied_count() >= base + 10, 60, "10 applies on the primary while the replica is held", interval=0.01)
            time.sleep(1.0)  # the runtime commits what it may: with replica waits, nothing of it
            past = sum(max(0, self.committed_offsets().get(p, -1) - e) for p, e in ends.items())
            return Held(filler, self.applied_count() - base, past, _replica_output_buffer(primary))
        finally:
            primary.close()


def _fill_link(primary: redis.Redis) -> int:
    """Write filler until the replica's output buffer holds some (the kernel's socket buffers to
    the stopped replica are full); the bytes written."""
    written = 0
    for n in range(1, 400):
        primary.set(f"postbox-test:filler:{n}", FILLER_VALUE)
        written += len(FILLER_VALUE)
        if n % 8 == 0 and _replica_output_buffer(primary) > 256 * 1024:
            return written
    raise AssertionError(f"the replica's output buffer stayed empty after {written / 1e6:.1f} MB of filler")


def _replica_output_buffer(primary: redis.Redis) -> int:
    """Bytes the primary holds for its replica in its own memory (not yet given to the kernel)."""
    return max((int(c.get("omem", 0)) for c in primary.client_list(_type="replica")), default=0)
