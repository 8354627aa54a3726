"""Benchmark: how long a setting changed with ``CONFIG SET`` goes unnoticed by a running consumer.

    python bench/verdict_window.py [--quick] [--batch-size B]

The engine reads the durability verdict once a minute, and at once when a connection reaches a
server with another ``run_id``; ``CONFIG SET`` keeps the ``run_id`` (docs/guarantees.md,
Durability). Measured on two private redis-servers (``appendonly yes``, ``appendfsync always``,
``maxmemory-policy noeviction``), applied to alternately batch after batch as the runtime does
(``engine.durability()`` before each ``engine.apply``, the batch held when it is not durable or
refused): right after the first verdict, one server gets ``CONFIG SET appendonly no`` (its applies
are no longer durable) and the other ``CONFIG SET maxmemory-policy volatile-lru`` (its markers may
be evicted). For each: the seconds from the ``CONFIG SET`` to the first batch held, and the events
applied meanwhile under the old verdict — what a crash or an eviction in that time could cost.
``--quick`` shortens the engine's re-read interval to 5 s (the default is 60 s).

Prints a table and, as its last line, one JSON object. Exits 1 when an engine answered fewer
events applied than it was given, or a change was never noticed (``bench/counting.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: tests.support

from postbox.effects import EffectConfigError, Effects, EffectsEngine, EventRef  # noqa: E402
from tests.support.redis_servers import RedisServer  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from counting import Tally, require_full_counts  # noqa: E402

TALLIES: list[Tally] = []
CHANGES = {"appendonly no": ("appendonly", "no"), "maxmemory-policy volatile-lru": ("maxmemory-policy", "volatile-lru")}


def batch(size: int) -> list[tuple[EventRef, Effects]]:
    run = uuid.uuid4().hex[:8]
    return [(EventRef(f"{run}-{i}", f"bench:{run}:{i}"), Effects().hincrby(f"{{bench:{run}:{i}}}:totals", "paid", 1)) for i in range(size)]


def held(engine: EffectsEngine) -> str | None:
    """Why the runtime would hold the next batch (not durable, or refused), or None."""
    try:
        verdict = engine.durability()
    except EffectConfigError as exc:
        return f"refused: {str(exc).splitlines()[0][:60]}"
    return None if verdict.durable else "not durable"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="re-read the verdict every 5 s instead of every 60 s")
    parser.add_argument("--batch-size", type=int, default=500, help="events per batch (the consumer's default batch)")
    args = parser.parse_args()
    refresh_s = 5.0 if args.quick else 60.0
    servers = {change: RedisServer(config={"maxmemory-policy": "noeviction"}).start() for change in CHANGES}
    clients = {change: server.client() for change, server in servers.items()}
    rows: dict[str, dict[str, float | str]] = {}
    try:
        engines = {change: EffectsEngine(clients[change], "bench", functions_dir=None, durability_refresh_s=refresh_s) for change in CHANGES}
        for engine in engines.values():
            engine.load()
            assert engine.durability().durable
        changed_at: dict[str, float] = {}
        applied = dict.fromkeys(CHANGES, 0)
        sent = dict.fromkeys(CHANGES, 0)
        for change, (setting, value) in CHANGES.items():
            clients[change].config_set(setting, value)
            changed_at[change] = time.monotonic()
        deadline = time.monotonic() + refresh_s * 2 + 30
        while len(rows) < len(CHANGES) and time.monotonic() < deadline:
            for change, engine in engines.items():
                if change in rows:
                    continue
                reason = held(engine)
                if reason is None:
                    try:
                        results = engine.apply(batch(args.batch_size))
                    except EffectConfigError:  # the re-read fell due inside this apply: refused before sending
                        reason = "refused"
                    else:
                        sent[change] += args.batch_size
                        applied[change] += sum(1 for r in results if r.applied)
                        continue
                rows[change] = {"seconds": round(time.monotonic() - changed_at[change], 2), "events_applied_meanwhile": applied[change],
                                "held_because": reason}  # fmt: skip
        for change in CHANGES:
            TALLIES.append(Tally(f"verdict window {change}: events applied", sent[change], applied[change]))
            TALLIES.append(Tally(f"verdict window {change}: change noticed", 1, int(change in rows)))
    finally:
        for client in clients.values():
            client.close()
        for server in servers.values():
            server.stop()
    load = os.getloadavg()[0]
    print(f"re-read every {refresh_s:g} s; batches of {args.batch_size}, the two servers alternately; load average {load:.1f}")
    print(f"{'CONFIG SET':<32}{'unnoticed s':>12}{'events applied meanwhile':>26}  then")
    for change, row in rows.items():
        print(f"{change:<32}{row['seconds']:>12.2f}{row['events_applied_meanwhile']:>26,}  {row['held_because']}")
    print(json.dumps({"bench": "verdict_window", "quick": args.quick, "refresh_s": refresh_s, "batch_size": args.batch_size,
                      "load": round(load, 1), **rows}))  # fmt: skip
    require_full_counts(TALLIES)


if __name__ == "__main__":
    main()
