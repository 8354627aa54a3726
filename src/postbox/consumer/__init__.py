"""The consumer runtime: handlers in user code, run against Kafka with exactly-once Redis effects.

- :class:`App` — register handlers (``@app.handler(aggregate_type, event_type)``, ``@app.catch_all``).
- :class:`ConsumerConfig` — every setting, from flags and ``POSTBOX_*`` variables, validated.
- :class:`ConsumerRuntime` / :func:`run` — the loop (``postbox consume MODULE:APP`` on the CLI).
- :mod:`postbox.consumer.deadletter` — the DLQ record contract and the failure stream.

See docs/consumer.md.
"""

from postbox.consumer.app import ANY, App, Route
from postbox.consumer.backoff import Backoff
from postbox.consumer.config import ConsumerConfig
from postbox.consumer.deadletter import DLQ_HEADERS, DeadLetters, Failure, dlq_headers, dlq_topic
from postbox.consumer.handler_errors import Retry
from postbox.consumer.loader import load_app
from postbox.consumer.metrics import Metrics
from postbox.consumer.runtime import ConsumerRuntime, run

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
