"""The consumer runtime: handlers in user code, run against Kafka with exactly-once Redis effects.

- :class:`App` — register handlers (``@app.handler(aggregate_type, event_type)``, ``@app.catch_all``).
- :class:`ConsumerConfig` — every setting, from flags and ``POSTBOX_*`` variables, validated.
- :class:`ConsumerRuntime` / :func:`run` — the loop (``postbox consume MODULE:APP`` on the CLI).
- :mod:`postbox.consumer.deadletter` — the DLQ record contract and the failure stream.

See docs/consumer.md.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from postbox.consumer.app import ANY, App, Route
    from postbox.consumer.backoff import Backoff
    from postbox.consumer.config import ConsumerConfig
    from postbox.consumer.deadletter import DLQ_HEADERS, DeadLetters, Failure, dlq_headers, dlq_topic
    from postbox.consumer.handler_errors import Retry
    from postbox.consumer.loader import load_app
    from postbox.consumer.metrics import Metrics
    from postbox.consumer.runtime import ConsumerRuntime, run

#: Every name, loaded from its module on first use (PEP 562): the incident commands import single
#: modules of this package (``dlq_record``, ``config``) and must not pay for the runtime, redis-py
#: and the metrics registry each time a CLI process starts (~0.5 s of CPU).
_LAZY = {
    "ANY": "app", "App": "app", "Route": "app", "Backoff": "backoff", "ConsumerConfig": "config",
    "DLQ_HEADERS": "deadletter", "DeadLetters": "deadletter", "Failure": "deadletter", "dlq_headers": "deadletter",
    "dlq_topic": "deadletter", "Retry": "handler_errors", "load_app": "loader", "Metrics": "metrics",
    "ConsumerRuntime": "runtime", "run": "runtime",
}  # fmt: skip


if not TYPE_CHECKING:  # a type checker sees the imports above: a misspelt name stays an error there

    def __getattr__(name: str) -> Any:
        """``from postbox.consumer import App`` and the like, loaded on first use."""
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(import_module(f"{__name__}.{module}"), name)
        globals()[name] = value  # found directly from now on
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *__all__})


__all__ = [
    "ANY",
    "DLQ_HEADERS",
    "App",
    "Backoff",
    "ConsumerConfig",
    "ConsumerRuntime",
    "DeadLetters",
    "Failure",
    "Metrics",
    "Retry",
    "Route",
    "dlq_headers",
    "dlq_topic",
    "load_app",
    "run",
]
