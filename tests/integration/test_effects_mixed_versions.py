"""A rolling deploy across the marker-identity change: the previous release and this one consume
one group side by side (or this one is rolled back), so a record either applied but did not
commit is redelivered to the other. Each must take the other's marker for a duplicate.

The previous release is run for real: its ``src/postbox`` from git (:data:`PREVIOUS_RELEASE`,
the last commit with the legacy marker layout) in a subprocess, against the same redis-server.
Before the fix this version wrote only its own marker, and the previous release applied the
redelivered event again (balance 1,000 for one 500-cent event posting to ``{ledger:7}`` for
order 42; the same with a user function, a hash and a group holding ``:``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from postbox.effects import Effects, EffectsEngine, EventRef
from tests.integration.conftest_effects import FUNCTIONS_DIR, own_redis  # noqa: F401 - fixtures
from tests.support.redis_servers import RedisServer

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
#: The parent of the commit that made the marker a function of the group and the event alone.
PREVIOUS_RELEASE = "ffedd772a10e25d0584e3ca8c57727a8d8fe2770^"

#: Applies one event with the previous release's engine (``apply_one(event_id, effects)``) and
#: prints its outcome; the effects come as ``[op, key, args...]`` lists.
DRIVER = """
import json, sys
import redis
from postbox.effects import Effects, EffectsEngine
import postbox.effects.engine as engine_module
spec = json.loads(sys.argv[1])
assert engine_module.__file__.startswith(spec["root"]), engine_module.__file__
fx = Effects()
for op, key, *args in spec["effects"]:
    if op == "call":
        fx.call(args[0], [key], args[1:])
    else:
        getattr(fx, op)(key, *args)
client = redis.Redis.from_url(spec["url"])
engine = EffectsEngine(client, spec["group"], functions_dir=spec["functions"])
print(engine.apply_one(spec["event_id"], fx).outcome.value)
"""


@pytest.fixture(scope="module")
def previous_release(tmp_path_factory) -> Path:
    """The previous release's ``src`` folder, unpacked from git."""
    out = tmp_path_factory.mktemp("previous")
    archive = out / "src.tar"
    done = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", "-o", str(archive), PREVIOUS_RELEASE, "src/postbox"],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, f"the previous release is not in this clone's history (clone without --depth): {done.stderr}"
    with tarfile.open(archive) as tar:
        # filter= is 3.11.4+ (Debian's 3.11.2 lacks it); the archive is this repository's own history
        tar.extractall(out, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    return out / "src"


def run_previous(src: Path, server: RedisServer, group: str, event_id: str, effects: list[list]) -> str:
    """The outcome ('applied', 'duplicate', 'failed') of one apply by the previous release."""
    spec = {"url": server.url, "group": group, "event_id": event_id, "effects": effects,
            "functions": str(FUNCTIONS_DIR), "root": str(src)}
    done = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(spec)], capture_output=True, text=True,
                          env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"}, cwd=src, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip()


def build(effects: list[list]) -> Effects:
    """The same effects with this release's builder."""
    fx = Effects()
    for op, key, *args in effects:
        if op == "call":
            fx.call(args[0], [key], args[1:])
        else:
            getattr(fx, op)(key, *args)
    return fx


@pytest.fixture
def names() -> Iterator[dict[str, str]]:
    suffix = uuid.uuid4().hex[:8]
    yield {"ledger": f"{{ledger:{suffix}}}:balance", "stock": f"{{stock:{suffix}}}", "totals": f"{{order:{suffix}}}:totals",
           "order": suffix}


CASES = {
    # the issue's reproduction: order 42's event posts to the ledger, not to its own keys
    "ledger": ("billing", lambda n: [["incrby", n["ledger"], 500]], lambda c, n: int(c.get(n["ledger"]))),
    # a group this release escapes: its marker and the legacy one differ even for aggregate keys
    "escaped group": ("billing%eu", lambda n: [["hincrby", n["totals"], "paid", 500]],
                           lambda c, n: int(c.hget(n["totals"], "paid"))),
    # a user function: the marker is read first and written after the function succeeded
    "user function": ("inventory", lambda n: [["call", n["stock"], "reserve", "sku-1", 2]],
                      lambda c, n: int(c.hget(n["stock"], "sku-1"))),
}


@pytest.mark.parametrize("case", CASES)
def test_an_event_this_release_applied_is_a_duplicate_for_the_previous_one(own_redis, previous_release, names, case) -> None:
    group, effects_of, value_of = CASES[case]
    client = own_redis.client()
    client.hset(names["stock"], "sku-1", 10)
    effects = effects_of(names)
    event_id = str(uuid.uuid4())
    ref = EventRef.for_aggregate(event_id, "order", names["order"])

    assert EffectsEngine(client, group, functions_dir=FUNCTIONS_DIR).apply_one(ref, build(effects)).applied
    applied_once = value_of(client, names)
    # not committed; redelivered to a member still on the previous release (or after a rollback)
    assert run_previous(previous_release, own_redis, group, event_id, effects) == "duplicate"
    assert value_of(client, names) == applied_once
    client.close()


@pytest.mark.parametrize("case", CASES)
def test_an_event_the_previous_release_applied_is_a_duplicate_for_this_one(own_redis, previous_release, names, case) -> None:
    group, effects_of, value_of = CASES[case]
    client = own_redis.client()
    client.hset(names["stock"], "sku-1", 10)
    effects = effects_of(names)
    event_id = str(uuid.uuid4())

    assert run_previous(previous_release, own_redis, group, event_id, effects) == "applied"
    applied_once = value_of(client, names)
    ref = EventRef.for_aggregate(event_id, "order", names["order"])
    assert EffectsEngine(client, group, functions_dir=FUNCTIONS_DIR).apply_one(ref, build(effects)).duplicate
    assert value_of(client, names) == applied_once
    client.close()


def test_a_failed_event_is_failed_earlier_here_and_new_to_the_previous_release(own_redis, previous_release, names) -> None:
    """The event fails here (undone, its verdict left in its marker): given it again, this release
    is told it failed earlier and runs nothing. The previous release reads only the legacy marker,
    which a failure does not write, so it applies the event as it did before the verdicts existed
    (documented limit of a rolling deploy: docs/effects.md, mixed versions)."""
    client = own_redis.client()
    client.hset(names["stock"], "sku-1", 1)
    effects = [["call", names["stock"], "reserve", "sku-1", 2]]  # short: fails
    event_id = str(uuid.uuid4())
    ref = EventRef.for_aggregate(event_id, "order", names["order"])
    engine = EffectsEngine(client, "inventory", functions_dir=FUNCTIONS_DIR)
    assert engine.apply_one(ref, build(effects)).failed
    client.hset(names["stock"], "sku-1", 5)
    again = engine.apply_one(ref, build(effects))
    assert again.failed and again.earlier is not None and not again.earlier.delivered
    assert int(client.hget(names["stock"], "sku-1")) == 5
    assert run_previous(previous_release, own_redis, "inventory", event_id, effects) == "applied"
    assert int(client.hget(names["stock"], "sku-1")) == 3
    client.close()


def test_after_the_cut_over_only_the_current_marker_is_written(own_redis, previous_release, names) -> None:
    """``legacy_markers=False`` ends the transition: what it costs when a previous-release member
    still runs (docs/effects.md: switch it off only when none does and one marker TTL has passed)."""
    client = own_redis.client()
    effects = [["incrby", names["ledger"], 500]]
    event_id = str(uuid.uuid4())
    ref = EventRef.for_aggregate(event_id, "order", names["order"])
    assert EffectsEngine(client, "billing", functions_dir=None, legacy_markers=False).apply_one(ref, build(effects)).applied
    assert run_previous(previous_release, own_redis, "billing", event_id, effects) == "applied"
    assert int(client.get(names["ledger"])) == 1000
    client.close()
