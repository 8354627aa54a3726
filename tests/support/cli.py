"""`postbox` commands run inside the test process (typer's CliRunner): the same command functions
as the console script, without a new interpreter per call (about a second saved each on a busy
2-core machine). For the success paths; tests of error output and exit codes of failures run the
real process (``tests.integration.incident_support.run_cli``), where ``main()`` prints them."""

from __future__ import annotations

import json
import time
import uuid
from functools import lru_cache
from typing import Any

from confluent_kafka import Consumer, TopicPartition

import typer
from typer.testing import CliRunner


@lru_cache(maxsize=1)
def _app() -> typer.Typer:
    from postbox.cli import _register, app

    _register([])
    return app


def invoke(*args: str) -> tuple[int, str]:
    """(exit code the console script would return, stdout); raises what the command raised."""
    result = CliRunner().invoke(_app(), list(args), standalone_mode=False, catch_exceptions=False,
                                env={"COLUMNS": "200"})
    code = result.return_value if isinstance(result.return_value, int) else result.exit_code
    return code, result.stdout


def invoke_json(*args: str, expect: int = 0) -> Any:
    code, out = invoke(*args, "--json")
    assert code == expect, f"postbox {' '.join(args)} → {code}, expected {expect}\n{out[-3000:]}"
    return json.loads(out)


def audit_records(bootstrap: str) -> list[dict[str, Any]]:
    """Every record of the audit topic (``postbox.audit``), read from Kafka directly — not through
    `postbox audit` — up to the end it has now."""
    from postbox.incident.audit import audit_topic

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"test-audit-{uuid.uuid4().hex}", "enable.auto.commit": False})
    records: list[dict[str, Any]] = []
    try:
        if audit_topic() not in consumer.list_topics(timeout=10).topics:
            return records  # nothing audited yet on this cluster
        tp = TopicPartition(audit_topic(), 0)
        low, high = consumer.get_watermark_offsets(tp, timeout=10)
        consumer.assign([TopicPartition(audit_topic(), 0, low)])
        last, deadline = low - 1, time.monotonic() + 30
        while last < high - 1 and time.monotonic() < deadline:
            for message in consumer.consume(500, 1.0):
                if not message.error():
                    records.append(json.loads(message.value()))
                    last = message.offset()
    finally:
        consumer.close()
    return records
