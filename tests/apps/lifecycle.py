"""Test app of the lifecycle hooks and the log context (tests/integration/test_consumer_lifecycle.py,
tests/integration/test_consumer_log_context.py).

Two start-up hooks (``journal``, then ``tally`` which takes ``journal``) and their shutdown hooks
write one line each to the file ``POSTBOX_TEST_HOOK_LOG`` names, so a test sees which ran, how
often and in which order. ``POSTBOX_TEST_FAIL_HOOK=tally`` makes ``tally`` raise. The handler takes
``tally`` by parameter name, counts its calls there, and logs through its own logger (not
``postbox``) at INFO and WARNING; ``Awaited`` events go to an async handler that logs at INFO; ``Refused`` events log an error and raise ValueError (dead-lettered).
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

from postbox.consumer import App
from postbox.effects import Effects, aggregate_keys
from postbox.events import Event

app = App("lifecycle")
log = logging.getLogger("shop.lifecycle_test")


def _note(line: str) -> None:
    with Path(os.environ.get("POSTBOX_TEST_HOOK_LOG", os.devnull)).open("a") as out:
        out.write(line + "\n")


@app.on_startup
def journal() -> list[str]:
    _note("startup journal")
    return []


@app.on_startup
def tally(journal: list[str]) -> dict[str, int]:
    if os.environ.get("POSTBOX_TEST_FAIL_HOOK") == "tally":
        raise RuntimeError("tally store unreachable")
    journal.append("tally opened")
    _note("startup tally")
    return {"calls": 0}


@app.on_shutdown
def close_journal(journal: list[str]) -> None:
    _note(f"shutdown journal {journal}")


@app.on_shutdown
def close_tally(tally: dict[str, int]) -> None:
    _note(f"shutdown tally calls={tally['calls']}")


@app.handler("*", "Counted")
def counted(event: Event, fx: Effects, tally: dict[str, int]) -> None:
    tally["calls"] += 1
    log.info("handler counted seq %s", event.payload["seq"])
    if event.payload["seq"] == 0:
        log.warning("first of its run")
    fx.hincrby(aggregate_keys(event.aggregate_type, event.aggregate_id)("count"), "n", 1)


@app.handler("*", "Refused")
def refused(event: Event, fx: Effects) -> None:
    log.error("refusing %s", event.id)
    raise ValueError("refused on purpose")


@app.handler("*", "Awaited")
async def awaited(event: Event, fx: Effects, tally: dict[str, int]) -> None:
    await asyncio.sleep(0)
    log.info("awaited seq %s", event.payload["seq"])
    fx.hincrby(aggregate_keys(event.aggregate_type, event.aggregate_id)("count"), "n", 1)
