"""Benchmark: events applied per second by the Redis effects engine, next to redis-benchmark.

    python bench/effects.py [--quick] [--redis-url redis://127.0.0.1:6379/0] [--events N]

Starts its own redis-server (appendonly yes, appendfsync always) on a free loopback port unless
``--redis-url`` is given, then measures in one run, on the same server:

- ``batched-B``: ``EffectsEngine.apply`` with ``batch_size=B`` events per script call (one call
  per round trip, as the engine sends them on one server), for several B; ``batched-1`` is one
  event per call (a tenth of the events);
- ``reference``: ``redis-benchmark`` (50 connections, no pipelining) running an equivalent
  one-event script: check a dedupe marker, HINCRBY one hash field, write the marker with a TTL;
- ``legacy-on-512`` / ``legacy-off-512`` (the default batch size): the cost of the upgrade transition's legacy-marker check
  (``EffectsEngine(legacy_markers=...)``), with events whose legacy key differs from the current
  marker (routed by a tag other than their first key's), so every event checks two keys when on.

Every engine event is one HINCRBY on its own aggregate's hash with dedupe on (marker check and
write, undo records prepared). Prints a table, then as its last line one JSON object with
``events_per_s`` (best engine mode), ``reference_per_s`` and ``ratio_to_reference``. Exits 1 when
the engine answered fewer events applied than it was given (``bench/counting.py``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: tests.support

from postbox.effects import DEFAULT_BATCH_SIZE, Effects, EffectsEngine, EventRef  # noqa: E402
from tests.support.redis_servers import RedisServer  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from counting import Tally, require_full_counts  # noqa: E402

REFERENCE_SCRIPT = (
    "if redis.call('EXISTS', KEYS[1]) == 0 then "
    "redis.call('HINCRBY', KEYS[2], 'paid', 1) "
    "redis.call('SET', KEYS[1], '1', 'PX', ARGV[1]) end return 1"
)
#: One tally per run: events given to the engine vs events it answered applied (bench/counting.py).
TALLIES: list[Tally] = []


def make_events(n: int, *, legacy_differs: bool = False) -> list[tuple[EventRef, Effects]]:
    """One HINCRBY per event on its aggregate's hash; routed by that aggregate (the legacy marker
    is then the same key), or with ``legacy_differs`` by another tag (two marker keys to check)."""
    run = uuid.uuid4().hex[:8]
    return [
        (
            EventRef(f"{run}-{i}", f"route:{run}:{i}" if legacy_differs else f"bench:{run}:{i}"),
            Effects().hincrby(f"{{bench:{run}:{i}}}:totals", "paid", 1),
        )
        for i in range(n)
    ]


def run_batched(client: redis.Redis, n: int, batch_size: int, *, legacy: bool | None = None) -> float:
    """``legacy`` None: default engine, events routed by their aggregate; True/False: events whose
    legacy key differs, with the transition check on/off."""
    engine = EffectsEngine(client, "bench", functions_dir=None, batch_size=batch_size, legacy_markers=legacy is not False)
    engine.load()
    engine.durability()
    events = make_events(n, legacy_differs=legacy is not None)
    applied = 0
    start = time.perf_counter()
    for i in range(0, n, 4096):  # as a consumer would: a poll's worth at a time
        applied += sum(1 for r in engine.apply(events[i : i + 4096]) if r.applied)
    elapsed = time.perf_counter() - start
    TALLIES.append(Tally(f"effects batched-{batch_size}{'' if legacy is None else f' legacy {legacy}'}: events applied", n, applied))
    return n / elapsed


def run_reference(host: str, port: int, n: int, client: redis.Redis) -> float:
    tool = shutil.which("redis-benchmark")
    if not tool:
        raise SystemExit("redis-benchmark not found (Debian: apt-get install redis-tools)")
    sha = client.script_load(REFERENCE_SCRIPT)
    proc = subprocess.run(
        [tool, "-h", host, "-p", str(port), "-n", str(n), "-c", "50", "-r", "100000000", "--csv",
         "EVALSHA", sha, "2", "bench:ref:m:__rand_int__", "bench:ref:h:__rand_int__", "691200000"],
        capture_output=True, text=True, timeout=600, check=True,
    )  # fmt: skip
    row = [line for line in proc.stdout.splitlines() if line.startswith('"EVALSHA')][-1]
    return float(row.split(",")[1].strip('"'))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short run (fewer events, one repetition)")
    parser.add_argument("--redis-url", help="use this server instead of starting one (its fsync policy is reported)")
    parser.add_argument("--events", type=int, help="events per measurement")
    args = parser.parse_args()
    n = args.events or (4_000 if args.quick else 40_000)
    repeats = 1 if args.quick else 3
    batch_sizes = [1, 16, 128, 512] if args.quick else [1, 8, 32, 128, 256, 512, 1024]

    server = None if args.redis_url else RedisServer().start()
    url = args.redis_url or server.url  # type: ignore[union-attr]
    client = redis.Redis.from_url(url)
    try:
        config = client.config_get("append*")
        info = client.info("server")
        host, port = client.connection_pool.connection_kwargs["host"], client.connection_pool.connection_kwargs["port"]
        figures: dict[str, float] = {}
        print(f"redis {info['redis_version']} at {host}:{port}, appendonly {config.get('appendonly')}, "
              f"appendfsync {config.get('appendfsync')}; {n} events per run, median of {repeats}")  # fmt: skip
        figures["reference"] = statistics.median(run_reference(host, port, n, client) for _ in range(repeats))
        for size in batch_sizes:
            events = n // 10 if size == 1 else n  # one round trip per event: a tenth of the events is enough
            figures[f"batched-{size}"] = statistics.median(run_batched(client, events, size) for _ in range(repeats))
        for legacy in (True, False):  # side by side: the transition's cost
            figures[f"legacy-{'on' if legacy else 'off'}-{DEFAULT_BATCH_SIZE}"] = statistics.median(
                run_batched(client, n, DEFAULT_BATCH_SIZE, legacy=legacy) for _ in range(repeats)
            )
        ref = figures["reference"]
        print(f"{'mode':<14}{'events/s':>12}{'vs reference':>15}")
        for mode, rate in figures.items():
            print(f"{mode:<14}{rate:>12,.0f}{rate / ref:>14.0%}")
        engine_modes = {m: r for m, r in figures.items() if m != "reference" and not m.startswith("legacy-")}
        best_mode = max(engine_modes, key=engine_modes.get)  # type: ignore[arg-type]
        best = engine_modes[best_mode]
        batched = {int(m.split("-")[1]): r for m, r in engine_modes.items() if m.startswith("batched-")}
        print(f"best: {best_mode} ({best / ref:.0%} of redis-benchmark's equivalent script)")
        print(json.dumps({
            "bench": "effects",
            "events": n,
            "quick": args.quick,
            "redis_version": info["redis_version"],
            "appendfsync": config.get("appendfsync"),
            "events_per_s": round(best),
            "best_mode": best_mode,
            "best_batch_size": max(batched, key=batched.get),  # type: ignore[arg-type]
            "batched_per_s": {str(k): round(v) for k, v in batched.items()},
            "legacy_on_per_s": round(figures[f"legacy-on-{DEFAULT_BATCH_SIZE}"]),
            "legacy_off_per_s": round(figures[f"legacy-off-{DEFAULT_BATCH_SIZE}"]),
            "legacy_cost_ratio": round(figures[f"legacy-on-{DEFAULT_BATCH_SIZE}"] / figures[f"legacy-off-{DEFAULT_BATCH_SIZE}"], 3),
            "reference_per_s": round(ref),
            "ratio_to_reference": round(best / ref, 3),
        }))  # fmt: skip
    finally:
        client.close()
        if server:
            server.stop()
    require_full_counts(TALLIES)


if __name__ == "__main__":
    main()
