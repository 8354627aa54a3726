"""Benchmark: what a DUMP-based undo record costs on a big key (docs/effects.md, Limits).

    python bench/undo_snapshot.py [--quick] [--rounds N]

Before a SET, a DEL or a user function that is not an event's last command, the apply script
DUMPs the key so that a failure later in the event can put it back (RESTORE, which the private
test servers check in full: ``sanitize-dump-payload yes``). The script blocks Redis while it runs,
so the copy is paid by every client of the server. On one private redis-server (``appendonly
yes``, ``appendfsync always``), for a string key and a hash key of growing size, one event per
call:

- ``applied``: ``SET <big key> x`` then ``HINCRBY`` (the SET is not last: its key is DUMPed);
- ``undone``: ``SET <big key> x`` then a command that fails (WRONGTYPE): the DUMP, then its
  RESTORE, checked in full (``sanitize-dump-payload yes``);
- ``undone, no check``: the same with ``sanitize-dump-payload no`` (Redis's default), set with
  ``CONFIG SET`` for that row only: what the full check of the payload adds;
- ``no snapshot``: ``HINCRBY`` then ``SET <big key> x``: the same writes, the SET last, so no
  undo record is kept (the script's rule for an event's last command); the gap to ``applied`` is
  the DUMP alone (replacing the big value costs both the same).

The big key is written again before each apply, outside the timing. Reported per size: the
script's run time in Redis (``INFO commandstats`` after a ``CONFIG RESETSTAT``: the time every
other client waits; no fsync) and the apply's wall time, medians of the rounds. Prints a table and,
as its last line, one JSON object. Exits 1 when an event did not come back as expected
(``bench/counting.py``).
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
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: tests.support

from postbox.effects import Effects, EffectsEngine, EventRef  # noqa: E402
from tests.support.redis_servers import RedisServer  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from counting import Tally, require_full_counts  # noqa: E402

TALLIES: list[Tally] = []
#: (kind, size in bytes of the key's contents)
SIZES = [("string", 1_000), ("string", 1_000_000), ("string", 10_000_000), ("string", 100_000_000),
         ("hash", 1_000_000), ("hash", 10_000_000)]  # fmt: skip
HASH_FIELD_BYTES = 100  # a hash of 10 MB is 100,000 fields of 100 bytes


def write_big(client: Any, key: str, kind: str, size: int) -> None:
    client.delete(key)
    if kind == "string":
        client.set(key, b"v" * size)
        return
    fields = size // HASH_FIELD_BYTES
    for start in range(0, fields, 10_000):
        client.hset(key, mapping={f"f{i:08d}": b"v" * (HASH_FIELD_BYTES - 9) for i in range(start, min(fields, start + 10_000))})


MODES = ("no snapshot", "applied", "undone", "undone, no check")


def one(engine: EffectsEngine, client: Any, mode: str, kind: str, size: int) -> tuple[float, float, bool]:
    """Script seconds, wall seconds and whether the outcome was the one expected, for one event."""
    tag = f"bench:{uuid.uuid4().hex[:8]}"
    big, other = f"{{{tag}}}:big", f"{{{tag}}}:other"
    write_big(client, big, kind, size)
    if mode == "no snapshot":
        fx = Effects().hincrby(other, "n", 1).set(big, "x")
    elif mode.startswith("undone"):
        client.set(other, "a string")
        fx = Effects().set(big, "x").sadd(other, "m")  # WRONGTYPE: the event fails and the SET is undone
    else:
        fx = Effects().set(big, "x").hincrby(other, "n", 1)
    client.config_resetstat()
    started = time.perf_counter()
    result = engine.apply_one(EventRef(f"{tag}-e", tag), fx)
    wall = time.perf_counter() - started
    script = float(client.info("commandstats").get("cmdstat_evalsha", {}).get("usec", 0)) / 1e6
    if mode.startswith("undone"):
        expected = result.failed and client.strlen(big) == size if kind == "string" else result.failed and client.hlen(big) == size // HASH_FIELD_BYTES
    else:
        expected = result.applied
    client.delete(big, other)
    return script, wall, bool(expected)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short run (the smaller sizes, 3 rounds)")
    parser.add_argument("--rounds", type=int, help="events per size and mode (default 7, quick 3)")
    args = parser.parse_args()
    rounds = args.rounds or (3 if args.quick else 7)
    sizes = [s for s in SIZES if s[1] <= 10_000_000] if args.quick else SIZES
    server = RedisServer(config={"auto-aof-rewrite-percentage": "0", "proto-max-bulk-len": "512mb"}).start()
    client = server.client()
    rows: list[dict[str, Any]] = []
    try:
        version = client.info("server")["redis_version"]
        sanitize = client.config_get("sanitize-dump-payload").get("sanitize-dump-payload")  # the server's own setting
        engine = EffectsEngine(client, "bench", functions_dir=None)
        engine.load()
        engine.durability()
        for kind, size in sizes:
            for mode in MODES:
                client.config_set("sanitize-dump-payload", "no" if mode.endswith("no check") else "yes")
                samples = [one(engine, client, mode, kind, size) for _ in range(rounds)]
                TALLIES.append(Tally(f"undo snapshot {kind} {size:,} B {mode}: events as expected", rounds, sum(ok for *_, ok in samples)))
                rows.append({"kind": kind, "bytes": size, "mode": mode,
                             "script_ms": round(statistics.median(s for s, _, _ in samples) * 1e3, 3),
                             "wall_ms": round(statistics.median(w for _, w, _ in samples) * 1e3, 3)})  # fmt: skip
    finally:
        client.close()
        server.stop()
    load = os.getloadavg()[0]
    print(f"redis {version}, appendfsync always, sanitize-dump-payload {sanitize}; median of {rounds} events per row; "
          f"load average {load:.1f}")  # fmt: skip
    print(f"{'key':<8}{'bytes':>13}  {'mode':<18}{'script ms':>11}{'wall ms':>10}")
    for r in rows:
        print(f"{r['kind']:<8}{r['bytes']:>13,}  {r['mode']:<18}{r['script_ms']:>11.3f}{r['wall_ms']:>10.3f}")
    print(json.dumps({"bench": "undo_snapshot", "quick": args.quick, "rounds": rounds, "redis_version": version,
                      "sanitize_dump_payload": sanitize, "load": round(load, 1), "rows": rows}))  # fmt: skip
    require_full_counts(TALLIES)


if __name__ == "__main__":
    main()
