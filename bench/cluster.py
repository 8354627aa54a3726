"""Benchmark: the effects engine on Redis Cluster, one master vs three, same events, same run.

    python bench/cluster.py [--quick] [--events N]

Starts two clusters of Debian's redis-server on free loopback ports (appendonly yes, appendfsync
always on every node): one with a single master (every slot on it) and one with three. Feeds each
the same kind of events — one HINCRBY per event on its own aggregate's hash, dedupe on — in
batches of 500 (``postbox consume``'s default batch size) through ``EffectsEngine.apply(...,
partial=True)``, as the runtime does on a cluster, and measures events applied per second. With
three masters each master's calls go out from their own thread, in parallel: the rate
grows with the masters only while Redis, not the client's own Python work (packing one script call
per slot), is the limit.

Prints a table, then as its last line one JSON object with ``one_master_per_s``,
``three_masters_per_s`` and ``masters_ratio`` (three / one). The three clusters share this
machine's cores and disk: on a 2-core host the ratio says more than the rates.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: tests.support

from postbox.effects import Effects, EffectsEngine, EventRef  # noqa: E402
from tests.support.redis_servers import RedisClusterProcesses  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from counting import Tally, require_full_counts  # noqa: E402

BATCH = 500


#: One tally per run: events given to the engine vs events it answered applied (bench/counting.py).
TALLIES: list[Tally] = []

def make_events(n: int) -> list[tuple[EventRef, Effects]]:
    run = uuid.uuid4().hex[:8]
    return [(EventRef(f"{run}-{i}", f"bench:{run}:{i}"), Effects().hincrby(f"{{bench:{run}:{i}}}:totals", "paid", 1)) for i in range(n)]


def run(cluster: RedisClusterProcesses, n: int) -> float:
    """Events applied per second through one engine, batches of ``BATCH``."""
    client = redis.RedisCluster(host="127.0.0.1", port=cluster.servers[0].port)
    try:
        engine = EffectsEngine(client, "bench", functions_dir=None)
        engine.load(publish=False)
        events = make_events(n)
        applied = 0
        started = time.perf_counter()
        for i in range(0, n, BATCH):
            applied += sum(1 for r in engine.apply(events[i : i + BATCH], partial=True) if r.applied)
        elapsed = time.perf_counter() - started
        TALLIES.append(Tally(f"cluster ({len(cluster.servers)} servers): events applied", n, applied))
        return n / elapsed
    finally:
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short run (fewer events, one repetition)")
    parser.add_argument("--events", type=int, default=None, help="events per measurement (default 20000, quick 5000)")
    args = parser.parse_args()
    n = args.events or (5_000 if args.quick else 20_000)
    repeats = 1 if args.quick else 3
    clusters = {"one master": RedisClusterProcesses(masters=1), "three masters": RedisClusterProcesses(masters=3)}
    figures: dict[str, list[float]] = {name: [] for name in clusters}
    try:
        for cluster in clusters.values():
            cluster.start()
        for _ in range(repeats):  # interleaved, so drift on a shared machine hits both alike
            for name, cluster in clusters.items():
                figures[name].append(run(cluster, n))
    finally:
        for cluster in clusters.values():
            cluster.stop()
    one, three = (statistics.median(figures[name]) for name in clusters)
    print(f"{'cluster':<16}{'events/s (median of ' + str(repeats) + ')':>28}   runs")
    for name, rates in figures.items():
        print(f"{name:<16}{statistics.median(rates):>28,.0f}   {', '.join(f'{r:,.0f}' for r in rates)}")
    print(f"three masters / one master: {three / one:.2f}  ({n:,} events per run, batches of {BATCH}, appendfsync always)")
    print(json.dumps({"events": n, "batch": BATCH, "one_master_per_s": round(one), "three_masters_per_s": round(three),
                      "masters_ratio": round(three / one, 2)}))  # fmt: skip
    require_full_counts(TALLIES)


if __name__ == "__main__":
    main()
