"""Benchmark: what keeping each partition's applied offset in Redis would cost an apply.

    python bench/applied_offsets.py [--quick] [--batches N] [--batch-size B] [--appendfsync always|everysec]

The design considered and not adopted in docs/guarantees.md ("Applied offsets kept in Redis"):
the apply script also writes the partition's applied offset, in the same script call as the
effects and markers. Measured here without changing the engine, through its public API only: the
offset write is one more effect command, an ``HSET <group's offsets> <topic>:<partition>
<offset>`` given as the *last* command of an event (the script keeps no undo record for an
event's last command, as it would keep none for the offset write), so it travels in the same
EVALSHA as the batch. The modes on one private redis-server (``appendonly yes``, ``appendfsync
always`` unless told otherwise, no AOF rewrite), interleaved batch by batch (each mode in each position in turn) so drift on a
shared host hits them alike:

- ``today``: B one-HINCRBY events (dedupe on), as the engine applies them now;
- ``today-again``: ``today`` once more, so the gap between the two shows the run's noise;
- ``per-call``: the same, the batch's last event also writing the offset: one HSET per script
  call, what a single server would pay (a 500-event batch is one call);
- ``per-slot``: every event also writing the offset to a hash in its own slot: what Redis Cluster
  would pay, where a call covers one hash slot and a batch of B aggregates spreads over about B
  slots, so each call (about one per event) must write the position its slot holds.

For each mode: the apply time of each batch (p50, p99), events/s, Redis's main-thread CPU per event
(``INFO cpu``: the script and the fsync), the script's own run time per event (``INFO
commandstats`` after a ``CONFIG RESETSTAT``, both outside the timed apply), and within it the
HSET's and the undo record's: giving the offset write as an event's last command makes the
command before it keep an undo record (an HGET of the HINCRBY's field) that a write made by the script itself would not,
so ``per-slot``'s script time overstates by that column. And AOF bytes per event. Prints a table and, as its
last line, one JSON object with the figures and the ratios of each mode to ``today``. Exits 1 when
the engine answered fewer events applied than it was given, or an offset hash does not hold the
last offset written (``bench/counting.py``).
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

import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: tests.support

from postbox.effects import Effects, EffectsEngine, EventRef  # noqa: E402
from tests.support.redis_servers import RedisServer  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from counting import Tally, require_full_counts  # noqa: E402

#: ``today-again`` is ``today`` once more: the gap between the two is the run's noise floor.
MODES = ("today", "per-call", "per-slot", "today-again")
GROUP = "bench"
TOPIC_PARTITION = "outbox.event.bench:0"
TALLIES: list[Tally] = []


def make_batch(mode: str, size: int, first_offset: int) -> list[tuple[EventRef, Effects]]:
    """``size`` one-HINCRBY events at offsets ``first_offset``..; the offset write as ``mode`` says."""
    run = uuid.uuid4().hex[:8]
    events = []
    for i in range(size):
        tag = f"bench:{run}:{i}"
        fx = Effects().hincrby(f"{{{tag}}}:totals", "paid", 1)
        offset = first_offset + i
        if mode == "per-slot":
            fx.hset(f"{{{tag}}}:applied:{GROUP}", TOPIC_PARTITION, offset)
        elif mode == "per-call" and i == size - 1:
            fx.hset(f"postbox:applied:{GROUP}", TOPIC_PARTITION, offset)
        events.append((EventRef(f"{run}-{i}", tag), fx))
    return events


def main_thread_cpu_s(client: redis.Redis) -> float:
    cpu = client.info("cpu")
    return float(cpu["used_cpu_sys_main_thread"]) + float(cpu["used_cpu_user_main_thread"])


#: Commands whose run time is read from ``INFO commandstats``: the script, and within it the
#: offset write and the undo record (HGET of the previous value) it makes the command before it keep.
TIMED = {"script": "cmdstat_evalsha", "hset": "cmdstat_hset", "undo": "cmdstat_hget"}


def command_seconds(client: redis.Redis) -> dict[str, float]:
    """Time Redis spent in each of :data:`TIMED` since the last ``CONFIG RESETSTAT`` (no fsync)."""
    stats = client.info("commandstats")
    return {name: float(stats.get(key, {}).get("usec", 0)) / 1e6 for name, key in TIMED.items()}


def aof_bytes(client: redis.Redis) -> int:
    return int(client.info("persistence")["aof_current_size"])


def measure(client: redis.Redis, batches: int, size: int) -> dict[str, dict[str, list[float]]]:
    """Per mode: each batch's apply time, Redis CPU and AOF growth, the modes interleaved."""
    engine = EffectsEngine(client, GROUP, functions_dir=None)
    engine.load()
    engine.durability()
    samples: dict[str, dict[str, list[float]]] = {m: {"seconds": [], "cpu": [], "aof": [], **{t: [] for t in TIMED}} for m in MODES}
    applied = dict.fromkeys(MODES, 0)
    offset = 0
    last_per_call = -1
    for round_ in range(batches):
        for mode in MODES[round_ % len(MODES) :] + MODES[: round_ % len(MODES)]:  # each mode in each position alike
            events = make_batch(mode, size, offset)
            if mode == "per-call":
                last_per_call = offset + size - 1
            offset += size
            client.config_resetstat()
            cpu, aof = main_thread_cpu_s(client), aof_bytes(client)
            started = time.perf_counter()
            results = engine.apply(events)
            samples[mode]["seconds"].append(time.perf_counter() - started)
            for name, spent in command_seconds(client).items():
                samples[mode][name].append(spent)
            samples[mode]["cpu"].append(main_thread_cpu_s(client) - cpu)
            samples[mode]["aof"].append(aof_bytes(client) - aof)
            applied[mode] += sum(1 for r in results if r.applied)
    for mode in MODES:
        TALLIES.append(Tally(f"applied offsets {mode}: events applied", batches * size, applied[mode]))
    stored = client.hget(f"postbox:applied:{GROUP}", TOPIC_PARTITION)
    TALLIES.append(Tally("applied offsets per-call: last offset stored", 1, int(stored is not None and int(stored) == last_per_call)))
    return samples


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summarise(samples: dict[str, dict[str, list[float]]], size: int) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for mode, s in samples.items():
        events = size * len(s["seconds"])
        out[mode] = {
            "p50_ms": round(statistics.median(s["seconds"]) * 1e3, 3),
            "p99_ms": round(percentile(s["seconds"], 0.99) * 1e3, 3),
            "events_per_s": round(events / sum(s["seconds"])),
            "redis_cpu_us_per_event": round(sum(s["cpu"]) / events * 1e6, 2),
            **{f"{t}_us_per_event": round(sum(s[t]) / events * 1e6, 2) for t in TIMED},
            "aof_bytes_per_event": round(sum(s["aof"]) / events, 1),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short run")
    parser.add_argument("--batches", type=int, help="batches per mode (default 200, quick 30)")
    parser.add_argument("--batch-size", type=int, default=500, help="events per batch (the consumer's default batch)")
    parser.add_argument("--appendfsync", default="always", choices=("always", "everysec"))
    args = parser.parse_args()
    batches = args.batches or (30 if args.quick else 200)
    # no AOF rewrite mid-run: it would shrink the file under one mode's batch and block the others
    server = RedisServer(config={"appendfsync": args.appendfsync, "auto-aof-rewrite-percentage": "0"}).start()
    client = server.client()
    try:
        version = client.info("server")["redis_version"]
        samples = measure(client, batches, args.batch_size)
    finally:
        client.close()
        server.stop()
    figures = summarise(samples, args.batch_size)
    load = os.getloadavg()[0]
    print(f"redis {version}, appendfsync {args.appendfsync}; {batches} batches of {args.batch_size} events per mode, "
          f"interleaved; load average {load:.1f}")  # fmt: skip
    print(f"{'mode':<12}{'p50 ms':>9}{'p99 ms':>9}{'events/s':>11}{'Redis CPU µs/event':>21}"
          f"{'script µs/event':>18}{'  of which HSET':>16}{' undo HGET':>12}{'AOF B/event':>13}")  # fmt: skip
    for mode, f in figures.items():
        print(f"{mode:<12}{f['p50_ms']:>9.2f}{f['p99_ms']:>9.2f}{f['events_per_s']:>11,}{f['redis_cpu_us_per_event']:>21.2f}"
              f"{f['script_us_per_event']:>18.2f}{f['hset_us_per_event']:>16.2f}{f['undo_us_per_event']:>12.2f}"
              f"{f['aof_bytes_per_event']:>13.1f}")  # fmt: skip
    today = figures["today"]
    ratios = {f"{mode}_{q}_ratio": round(figures[mode][q] / today[q], 3)
              for mode in MODES[1:] for q in ("p50_ms", "redis_cpu_us_per_event", "script_us_per_event")}  # fmt: skip
    print(json.dumps({"bench": "applied_offsets", "quick": args.quick, "batches": batches, "batch_size": args.batch_size,
                      "appendfsync": args.appendfsync, "redis_version": version, "load": round(load, 1), **figures, **ratios}))  # fmt: skip
    require_full_counts(TALLIES)


if __name__ == "__main__":
    main()
