"""Property: whatever happens around it, the consumer never applies an event twice, never applies
one out of order within its aggregate, and never commits past one that is neither applied nor
dead-lettered.

Driven: the real runtime — batch model, partition states, pipeline (prepare, launch, settle,
dead letters, failure verdicts in the markers), the real ``DeadLetters``, the real ``EffectsEngine`` and
its Lua script on a private redis-server (AOF, ``appendfsync always``: durable, as the consumer
requires) — turned one loop at a time (tests/support/consumer_processes.py) over a model of Kafka
(tests/support/kafka_model.py): per partition a list of records, the group's committed offsets
that only a commit that lands moves, processes that start again from them, window runs over a
range (``consume --from --until``, allowed only where the CLI's own check,
``ahead_of_group``, allows it without ``--force``).

Generated: the events (three aggregates on two partitions) and what each one does — applies, its
handler raises for good (dead-lettered), asks for a retry once or twice (``Retry``), or its effect
fails in the script (WRONGTYPE on a key the handler touches: dead-lettered, effect undone) —
and a sequence of what happens: loop turns, the dead-letter topic refusing or taking writes,
commits refused by the broker, a SIGKILL (with the commits in flight landing or not), a SIGTERM, a
rebalance (everything revoked and assigned again), a window run beside the group (running or
stopped), time passing (backoffs end). Time is the runtime's ``time.monotonic`` made virtual, and
what the driver does to Redis waits for the apply in flight, so an example replays exactly. Then the group runs until it has committed every partition's end
with Kafka healthy.

Checked: at every commit that lands, every record before it is applied or dead-lettered; at the
end, every event applied at most once (its handler's counter in the same script), each
aggregate's events applied in order, every event applied or dead-lettered, and none both.

Two properties: effects that fail keep failing, and effects that may succeed when run again
(``heal``: what they met is fixed), which finds the paths where a record whose effect failed could
run again after its successors were applied. ``PATHS`` names each path it found while the
verdicts were kept per partition beside the markers (each failed then: the verdict paid at the
dead letter's ack before the commit landed, none kept before the batch settled, window runs not
reading them); with the verdicts in the markers every one holds. A window over the group's past
is held to the same rule: it never runs an event the group dead-lettered.

What the model leaves out: Redis outages and failovers, Redis Cluster (held records, lanes),
several live members at once (a rebalance here hands the partitions back to the same process),
librdkafka's prefetching past a pause, and fetch errors. The test_effects_* properties cover
the script itself.
"""

from __future__ import annotations

import random
import time
import uuid
from collections import Counter
from contextlib import ExitStack
from typing import Any
from unittest import mock

import pytest
import redis
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from postbox.consumer import App, ConsumerConfig, Retry
from postbox.consumer.window import Span
from postbox.incident.window import WindowRow
from postbox.incident.window_order import ahead_of_group
from tests.support.consumer_processes import Process, group_member, window_run
from tests.support.kafka_model import TOPIC, KafkaModel, LogRecord
from tests.support.redis_servers import RedisServer

pytestmark = pytest.mark.integration

PARTITIONS, AGGREGATES = 2, 3
OK, FAILS, RETRY, POISON = "ok", "handler-fails", "handler-retry", "effect-fails"
#: Turns the drain may take, and window turns at most.
DRAIN_TURNS, WINDOW_TURNS = 300, 12


@pytest.fixture(scope="module")
def server():
    own = RedisServer(config={"appendonly": "yes", "appendfsync": "always"}).start()
    yield own
    own.stop()


class Clock:
    """The runtime's clock (backoffs, carried records, final-commit retries) made virtual: the
    property decides when time passes, so an example replays exactly."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


class Scene:
    """One example: the model, the scripted app, the processes, and what is checked."""

    def __init__(self, client: redis.Redis, server: RedisServer, events: list[tuple[int, str, int]], seed: int) -> None:
        client.flushdb()
        self.client = client
        self.rng = random.Random(seed)
        self.clock = Clock()
        self.kafka = KafkaModel(PARTITIONS)
        self.kafka.on_land = self._landed
        self.kinds: dict[str, tuple[str, int]] = {}
        self.records: dict[str, LogRecord] = {}
        seqs: Counter[int] = Counter()
        for aggregate, kind, times in events:
            event_id = str(uuid.uuid4())
            record = self.kafka.append(aggregate % PARTITIONS, event_id, f"a{aggregate}", seqs[aggregate])
            seqs[aggregate] += 1
            self.kinds[event_id], self.records[event_id] = (kind, times), record
            if kind == POISON:
                client.set(self._poison(record), b"not a set")
        self.attempts: Counter[str] = Counter()
        self.app = App("g", require_schemas=False)
        self.app.catch_all(self._handle)
        self.config = ConsumerConfig.load({}, group="g", topics=TOPIC, redis_url=server.url, kafka_bootstrap="127.0.0.1:1",
                                          batch_size=4, handler_retries=0, backoff_base_ms=10, backoff_max_ms=40)
        self.group: Process | None = None
        self.processes = 0
        self.runner = ""
        self.violations: list[str] = []
        self.windows = 0
        self.windows_refused = 0

    # -- the app ------------------------------------------------------------------------------

    @staticmethod
    def _poison(record: LogRecord) -> str:
        return f"{{t:{record.aggregate}}}:poison:{record.event_id}"

    def _handle(self, event: Any, fx: Any) -> None:
        kind, times = self.kinds[event.id]
        if kind == FAILS:
            raise ValueError(f"a handler bug on {event.id}")
        if kind == RETRY and self.attempts[event.id] < times:
            self.attempts[event.id] += 1
            raise Retry("a dependency is down")
        record = self.records[event.id]
        tag = f"{{t:{record.aggregate}}}"
        fx.rpush(f"{tag}:order", record.seq)
        fx.hincrby(f"{tag}:applied", event.id, 1)
        fx.hset(f"{tag}:by", {event.id: self.runner})
        if kind == POISON:
            fx.sadd(self._poison(record), "x")  # WRONGTYPE while the key holds a string

    # -- what happens ---------------------------------------------------------------------------

    def act(self, action: tuple[Any, ...]) -> None:
        kind = action[0]
        if kind == "turn":
            self._member().turn()
        elif kind == "dlq":
            self.kafka.dlq_up = action[1]
        elif kind == "commits":
            self.kafka.refuse_commits = action[1]
        elif kind == "tick":
            self.clock.sleep(0.1)
        elif kind == "heal":
            if self.group is not None:
                self.group.wait_for_apply()
            for event_id, (what, _times) in self.kinds.items():
                if what == POISON:
                    self.client.delete(self._poison(self.records[event_id]))
        elif kind in ("crash", "stop", "rebalance") and self.group is not None:
            if kind == "rebalance":
                self.group.rebalance()
                return
            self.group.crash(commits_land=action[1]) if kind == "crash" else self.group.stop()
            self.group = None
        elif kind == "window":
            self._window(*action[1:])

    def _member(self) -> Process:
        if self.group is None:
            self.processes += 1
            self.runner = f"group-{self.processes}"
            self.group = group_member(self.runner, self.app, self.config, self.client, self.kafka, self.rng)
        self.runner = self.group.name
        return self.group

    def _window(self, from_committed: bool, start_pct: int, length_pct: int, turns: int) -> None:
        committed = dict(self.kafka.committed)
        rows = []
        for p in range(PARTITIONS):
            high = self.kafka.high(p)
            start = committed.get(p, 0) if from_committed else start_pct * high // 100
            rows.append(WindowRow(Span(TOPIC, p, start, start + length_pct * (high - start) // 100), 0, high))
        if ahead_of_group(rows, {(TOPIC, p): o for p, o in committed.items()}):
            self.windows_refused += 1  # refused without --force, as the CLI does
            return
        self.windows += 1
        name = f"window-{self.windows}"
        run = window_run(name, self.app, self.config, self.client, self.kafka, self.rng, [r.span for r in rows])
        self.runner = name
        for _ in range(turns):
            if run.finished:
                break
            run.turn()
            self.clock.sleep(0.05)
        run.stop()
        self.runner = self.group.name if self.group is not None else ""

    def drain(self) -> None:
        """Kafka healthy; the group runs until it has committed every partition's end."""
        self.kafka.dlq_up, self.kafka.refuse_commits = True, False
        for _ in range(DRAIN_TURNS):
            if all(self.kafka.committed.get(p, 0) == self.kafka.high(p) for p in range(PARTITIONS)):
                break
            self._member().turn()
            self.clock.sleep(0.1)
        else:
            self.violations.append(f"the group did not finish: committed {self.kafka.committed}, ends "
                                   f"{[self.kafka.high(p) for p in range(PARTITIONS)]}")
        if self.group is not None:
            self.group.stop()
            self.group = None

    def close(self) -> None:
        if self.group is not None:
            self.group.crash(commits_land=False)

    # -- what is checked -------------------------------------------------------------------------

    def _counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for a in range(AGGREGATES):
            counts.update({k.decode(): int(v) for k, v in self.client.hgetall(f"{{t:a{a}}}:applied").items()})
        return counts

    def _landed(self, partition: int, offset: int) -> None:
        counts, dead = self._counts(), {e for _p, _o, e in self.kafka.dead_letters}
        for record in self.kafka.log[partition][:offset]:
            if not counts.get(record.event_id) and record.event_id not in dead:
                self.violations.append(f"commit of offset {offset} landed past {TOPIC}[{partition}]@{record.offset} "
                                       f"({self.kinds[record.event_id][0]}), neither applied nor dead-lettered")
                return

    def verdict(self) -> list[str]:
        found = list(self.violations)
        counts, dead = self._counts(), Counter(e for _p, _o, e in self.kafka.dead_letters)
        for event_id, record in self.records.items():
            kind, applied = self.kinds[event_id][0], counts.get(event_id, 0)
            where = f"{TOPIC}[{record.partition}]@{record.offset} ({kind})"
            if applied > 1:
                found.append(f"{where} applied {applied} times")
            if not applied and not dead[event_id]:
                found.append(f"{where} neither applied nor dead-lettered")
            if applied and dead[event_id]:
                found.append(f"{where} both applied and dead-lettered")
        for a in range(AGGREGATES):
            seq_ids = {r.seq: e for e, r in self.records.items() if r.aggregate == f"a{a}"}
            order = [int(s) for s in self.client.lrange(f"{{t:a{a}}}:order", 0, -1)]
            if order != sorted(set(order)):
                found.append(f"aggregate a{a} applied out of order: {order} (kinds {[self.kinds[seq_ids[s]][0] for s in sorted(seq_ids)]})")
        return found


def run_scene(server: RedisServer, events: list[tuple[int, str, int]], actions: list[tuple[Any, ...]], seed: int) -> list[str]:
    client = server.client()
    scene = Scene(client, server, events, seed)
    try:
        with ExitStack() as patches:
            for module in ("postbox.consumer.partitions", "postbox.consumer.pipeline"):
                patches.enter_context(mock.patch(f"{module}.time", scene.clock))
            for action in actions:
                scene.act(action)
            scene.drain()
        return scene.verdict()
    finally:
        scene.close()
        client.close()


EVENTS = st.lists(st.tuples(st.integers(0, AGGREGATES - 1), st.sampled_from([OK, OK, OK, FAILS, RETRY, POISON]), st.integers(1, 2)),
                  min_size=1, max_size=14)
TURN = st.just(("turn",))
ACTIONS_WITHOUT_HEAL = [
    TURN, TURN, TURN, TURN,
    st.tuples(st.just("dlq"), st.booleans()),
    st.tuples(st.just("commits"), st.booleans()),
    st.tuples(st.just("crash"), st.booleans()),
    st.just(("stop",)),
    st.just(("rebalance",)),
    st.tuples(st.just("window"), st.booleans(), st.integers(0, 100), st.integers(0, 100), st.integers(1, WINDOW_TURNS)),
    st.just(("tick",)),
]
HEAL_ACTION = st.just(("heal",))
PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@PROPERTY
@given(events=EVENTS, actions=st.lists(st.one_of(*ACTIONS_WITHOUT_HEAL), min_size=6, max_size=40), seed=st.integers(0, 2**16))
def test_failures_restarts_failed_commits_and_windows_never_break_exactly_once_or_order(server, events, actions, seed) -> None:
    """Effects that fail keep failing: a re-run of a record whose effect failed fails again."""
    assert run_scene(server, events, actions, seed) == []



# -- effects that succeed when run again ------------------------------------------------------------
#
# A record whose effect failed in the script was judged in the same call as its successors, which
# are applied. Run again once what it met is fixed, it would apply after them, and be in the
# dead-letter topic as well. Its verdict in its marker prevents that on every path below (each one
# failed while the verdicts were kept per partition beside the markers). Two events of one
# aggregate: the first one's effect fails (until "heal"), the second one applies.

T, HEAL = ("turn",), ("heal",)
PATHS = [
    pytest.param([T, ("commits", True), T, T, ("stop",), HEAL], 0, id="dead-letter-acknowledged-commit-never-lands"),
    pytest.param([T, T, HEAL, ("crash", False)], 0, id="crash-after-the-ack-before-the-commit-lands"),
    pytest.param([T, HEAL, ("crash", True)], 0, id="crash-before-the-failed-batch-settles"),
    pytest.param([("dlq", False), T, T, HEAL, ("stop",), ("window", True, 0, 100, 6)], 0, id="window-over-an-owed-record"),
    pytest.param([("window", True, 0, 100, 6), HEAL], 0, id="window-ahead-of-a-stopped-group-meets-the-failure"),
    pytest.param([("dlq", False), T, T, HEAL, ("crash", True)], 0, id="dead-letter-refused-then-a-restart"),
    pytest.param([("dlq", False), T, T, HEAL, ("rebalance",), ("dlq", True), ("tick",), T, T], 0, id="dead-letter-refused-then-a-rebalance"),
    pytest.param([("dlq", False), T, T, HEAL, ("dlq", True), ("tick",), T, T], 0, id="dead-letter-refused-then-the-retry"),
    pytest.param([T, T, T, ("stop",), HEAL, ("window", False, 0, 100, 6)], 0, id="window-over-the-groups-past-leaves-its-dead-letters"),
]


@pytest.mark.parametrize(("actions", "seed"), PATHS)
def test_a_record_whose_effect_failed_never_runs_again_after_its_successor(server, actions, seed) -> None:
    """Each path alone (fixed examples, so each one has a name)."""
    assert run_scene(server, [(0, POISON, 1), (0, OK, 1)], actions, seed) == []


@PROPERTY
@given(events=EVENTS, actions=st.lists(st.one_of(*ACTIONS_WITHOUT_HEAL, HEAL_ACTION), min_size=6, max_size=40), seed=st.integers(0, 2**16))
@example(events=[(0, POISON, 1), (0, OK, 1)], actions=[T, T, HEAL, ("crash", False)], seed=0)
def test_with_effects_that_succeed_when_run_again_too(server, events, actions, seed) -> None:
    """The whole property: a failed effect may succeed when run again (what it met is fixed:
    ``heal``), so a record whose effect failed must never run again once its successors are
    applied."""
    assert run_scene(server, events, actions, seed) == []
