"""Soak: a steady writer load with a kill every few seconds across every component, then the verdict.

    python bench/faults.py [--quick] [--events N] [--rate R] [--kill-every MIN MAX] [--seed S]

Against the running stack (`postbox up`; it kills and restarts that stack's processes, so never
point it at a stack other people use). Emits N events through the writer (Avro ``OrderPlaced``,
50 aggregates, 6 events per transaction, at most R events/s), runs one `postbox consume` process
of ``tests.apps.counting:audited``, and every MIN..MAX seconds kills one of: the consumer
(SIGKILL, alternately while a handler runs and between an acknowledged apply and its commit),
Kafka Connect (SIGKILL), the Kafka broker (SIGKILL), Redis (SIGKILL right after an acknowledged
apply, AOF restart) or PostgreSQL (immediate stop), restarting it at once. Then it
drains and checks: every committed event applied exactly once, none lost, order per aggregate.

Prints the kills with their recovery times (kill → the first event committed after it applied),
a figures table, and as its LAST line one JSON object. Exit code 1 on any violation.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.faults.harness import FaultRun  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="10,000 events")
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--rate", type=float, default=600.0, help="events/s at most")
    parser.add_argument("--kill-every", type=float, nargs=2, default=(2.0, 5.0), metavar=("MIN", "MAX"))
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    events = 10_000 if args.quick and args.events == 100_000 else args.events
    seed = args.seed if args.seed is not None else random.randrange(1_000_000)
    rng = random.Random(seed)
    print(f"soak: {events:,} events at ≤{args.rate:.0f}/s, a kill every {args.kill_every[0]:.0f}-{args.kill_every[1]:.0f} s, seed {seed}", flush=True)

    tmp = Path(tempfile.mkdtemp(prefix="postbox-soak-"))
    run = FaultRun("soak", tmp, rate=args.rate, per_tx=6, aggregates=50, batch_size=200, sleep_ms=0, limit=events,
                   log=lambda line: print(line, flush=True))
    started = time.monotonic()
    try:
        run.start()
        last_report = 0.0
        while run.emitter.count() < events:
            run.steady(rng.uniform(*args.kill_every))
            if run.emitter.count() >= events:
                break
            run.kill(rng.choice(FaultRun.KILLS))
            if time.monotonic() - last_report > 30:
                last_report = time.monotonic()
                print(f"   ... {run.emitter.count():,}/{events:,} committed, {run.applied_count():,} applied, "
                      f"{len(run.kills)} kills, {time.monotonic() - started:.0f} s", flush=True)
        verdict = run.verdict(drain_timeout=900)
    finally:
        run.close()

    print()
    print(verdict.report())
    f = verdict.figures()
    print()
    print("| component | kills | recovery median (s) | recovery max (s) |")
    print("|---|---:|---:|---:|")
    for component in FaultRun.KILLS:
        times = f["recovery_s"].get(component, [])
        if times:
            print(f"| {component} | {len(times)} | {statistics.median(times):.2f} | {max(times):.2f} |")
    print()
    print("| events committed | applied | lost | applied twice | topic re-sends | redeliveries absorbed | duplicates absorbed | commit failures (resolved committed / retried) | seconds |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    doubles = sum(1 for v in verdict.violations if "twice" in v or "times" in v)
    print(f"| {f['events_committed']:,} | {f['events_applied']:,} | {f['lost']} | {doubles} | {f['duplicates_from_topic']:,} | "
          f"{f['duplicates_from_redelivery']:,} | {f['duplicates_absorbed']:,} | {f['commit_failures']} ({f['commits_resolved_committed']} / {f['transactions_retried']}) | {f['seconds']:.0f} |")
    print(json.dumps({**f, "seed": seed, "rate_limit": args.rate, "logs": str(tmp)}, sort_keys=True))
    return 0 if not verdict.violations else 1


if __name__ == "__main__":
    sys.exit(main())
