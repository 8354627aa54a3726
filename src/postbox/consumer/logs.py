"""Structured logs: every runtime log line carries fields (group, topic, partition, offset, ...).

``configure("json")`` prints one JSON object per line on stderr (``ts``, ``level``, ``logger``,
``msg`` and the fields); ``configure("text")`` prints ``msg key=value ...``. Call sites use
:func:`log_event` so both formats get the same fields.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import datetime, timezone
from typing import Any

_FIELDS = "postbox_fields"


def log_event(logger: logging.Logger, level: int, msg: str, **fields: Any) -> None:
    if logger.isEnabledFor(level):
        logger.log(level, msg, extra={_FIELDS: fields})


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        data.update(getattr(record, _FIELDS, None) or {})
        if record.exc_info:
            data["exc"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = getattr(record, _FIELDS, None)
        if fields:
            line += " " + " ".join(f"{k}={_short(v)}" for k, v in fields.items())
        return line


def _short(value: Any) -> str:
    text = str(value)
    if " " in text or not text:
        text = json.dumps(text, ensure_ascii=False)
    return text if len(text) <= 300 else text[:297] + "..."


def configure(log_format: str = "text", level: str = "INFO") -> None:
    """Send the ``postbox`` loggers to stderr in ``log_format`` (replaces earlier handlers)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger("postbox")
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    root.propagate = False
