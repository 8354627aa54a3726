"""The consumer runtime: handlers in user code, run against Kafka with exactly-once Redis effects.

- :class:`App` — register handlers (``@app.handler(aggregate_type, event_type)``, ``@app.catch_all``).
- :class:`ConsumerConfig` — every setting, from flags and ``POSTBOX_*`` variables, validated.
- :class:`ConsumerRuntime` / :func:`run` — the loop (``postbox consume MODULE:APP`` on the CLI).
- :mod:`postbox.consumer.deadletter` — the DLQ record contract and the failure stream.
- :class:`Observed` — what ``ConsumerRuntime(observer=...)`` is told of each settled record.

See docs/consumer.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from postbox.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from postbox.consumer.app import ANY, App, Route
    from postbox.consumer.backoff import Backoff
    from postbox.consumer.config import ConsumerConfig
    from postbox.consumer.deadletter import DLQ_HEADERS, DeadLetters, Failure, dlq_headers, dlq_topic
    from postbox.consumer.handler_errors import Retry
    from postbox.consumer.loader import load_app
    from postbox.consumer.metrics import Metrics
    from postbox.consumer.observation import Observed, Observer
    from postbox.consumer.runtime import ConsumerRuntime, run

#: Every name, loaded from its module on first use (PEP 562): the incident commands import single
#: modules of this package (``dlq_record``, ``config``) and must not pay for the runtime, redis-py
#: and the metrics registry each time a CLI process starts (~0.5 s of CPU).
_LAZY = {
    "ANY": "postbox.consumer.app",
    "App": "postbox.consumer.app",
    "Route": "postbox.consumer.app",
    "Backoff": "postbox.consumer.backoff",
    "ConsumerConfig": "postbox.consumer.config",
    "DLQ_HEADERS": "postbox.consumer.deadletter",
    "DeadLetters": "postbox.consumer.deadletter",
    "Failure": "postbox.consumer.deadletter",
    "dlq_headers": "postbox.consumer.deadletter",
    "dlq_topic": "postbox.consumer.deadletter",
    "Retry": "postbox.consumer.handler_errors",
    "load_app": "postbox.consumer.loader",
    "Metrics": "postbox.consumer.metrics",
    "Observed": "postbox.consumer.observation",
    "Observer": "postbox.consumer.observation",
    "ConsumerRuntime": "postbox.consumer.runtime",
    "run": "postbox.consumer.runtime",
}


if not TYPE_CHECKING:  # a type checker sees the imports above: a misspelt name stays an error there
    __getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())


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
    "Observed",
    "Observer",
    "Retry",
    "Route",
    "dlq_headers",
    "dlq_topic",
    "load_app",
    "run",
]
