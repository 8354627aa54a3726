"""The retention policies the writer and `postbox db` know, and how to read one from settings."""

from __future__ import annotations

import os
from enum import Enum

from postbox.errors import ConfigError

ENV = "POSTBOX_OUTBOX_RETENTION"


class Retention(str, Enum):
    """How outbox rows go away once Debezium has read their inserts from the WAL.

    PARTITIONS (default, measured cheapest): emit only inserts; `postbox db retention` (cron)
    drops whole time partitions once they are older than the keep period.
    DELETE: emit deletes its row again in the same transaction (Debezium's classic advice); the
    table stays empty, at the price of a delete, a dead tuple and vacuum work per event.
    """

    PARTITIONS = "partitions"
    DELETE = "delete"

    @classmethod
    def parse(cls, value: "str | Retention | None") -> "Retention":
        if value is None or value == "":
            value = os.environ.get(ENV) or cls.PARTITIONS.value
        if isinstance(value, Retention):
            return value
        try:
            return cls(value.lower())
        except ValueError:
            raise ConfigError(
                f"retention policy {value!r} is unknown",
                fix=f"use one of {', '.join(r.value for r in cls)} (flag --retention or {ENV})",
            ) from None
