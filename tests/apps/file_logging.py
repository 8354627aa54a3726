"""Test app that configures logging itself (tests/integration/test_consumer_app_logging.py).

At import it installs a file handler on the root logger, as a service with its own logging setup
does, writing to the file ``POSTBOX_TEST_APP_LOG`` names; its formatter prints the event id the
log context puts on each record (``-`` outside an event). The handler logs one INFO line per event
and counts it in Redis.
"""

from __future__ import annotations

import logging
import os

from postbox.consumer import App
from postbox.effects import Effects, aggregate_keys
from postbox.events import Event


class _WithEventId(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"{super().format(record)} event_id={getattr(record, 'event_id', '-')}"


_handler = logging.FileHandler(os.environ["POSTBOX_TEST_APP_LOG"])
_handler.setFormatter(_WithEventId("%(levelname)s %(name)s: %(message)s"))
logging.getLogger().addHandler(_handler)

app = App("file_logging")
log = logging.getLogger("shop.file_logging_test")


@app.handler()
def count(event: Event, fx: Effects) -> None:
    log.info("handled seq %s", event.payload["seq"])
    fx.incrby(aggregate_keys(event.aggregate_type, event.aggregate_id)("app_logging"))
