"""#16 acceptance: the README's "Write a handler" hooks example, tried as a new user would — copied
from README.md into a fresh folder (with the walkthrough's schemas/), run with `postbox consume`
from there against the stack, an event emitted through the outbox with a traceparent. Its start-up
hook opens the database, the handler gets it by name and logs with the event's fields (JSON),
/healthz and /readyz answer as the README's table says, and SIGTERM runs the shutdown hook."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import uuid
from datetime import datetime, timezone

import httpx
import psycopg
import pytest

from postbox import outbox
from tests.support.consumers import ROOT, commit_at_end, wait_for
from tests.support.redis_servers import free_port

pytestmark = pytest.mark.integration

TRACE_ID = uuid.uuid4().hex


def _readme_block(first_line: str) -> str:
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    return next(b for b in blocks if b.startswith(first_line))


def _status(port: int, path: str) -> int:
    try:
        return httpx.get(f"http://127.0.0.1:{port}{path}", timeout=5).status_code
    except httpx.TransportError:
        return 0


def test_the_readme_hooks_example_from_a_fresh_folder(settings, redis_client, unique, tmp_path):
    folder = tmp_path / "service"
    (folder / "consumers").mkdir(parents=True)
    (folder / "consumers" / "__init__.py").write_text("")
    code = _readme_block("# consumers/charges.py")
    # the README's shutdown hook, made visible to the test: it also writes a file when it runs
    code = code.replace("    db.close()\n", "    db.close()\n    open('closed', 'w').write('db')\n")
    (folder / "consumers" / "charges.py").write_text(code)
    shutil.copytree(ROOT / "schemas", folder / "schemas")
    port = free_port()
    group = f"test-readme-{unique}"
    env = {**os.environ, "POSTBOX_REDIS_URL": settings.redis_url, "POSTBOX_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
           "CHARGES_DATABASE_URL": settings.database_url, "PYTHONUNBUFFERED": "1"}
    env.pop("PYTHONPATH", None)
    commit_at_end(settings.kafka_bootstrap, group, "outbox.event.order")  # starts at today's end, whatever its start-up timing
    log_path = tmp_path / "consume.log"
    with log_path.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", "from postbox.cli import main; main()", "consume", "consumers.charges:app",
                                 "--group", group, "--auto-offset-reset", "latest", "--metrics-port", str(port), "--log-format", "json"],
                                cwd=folder, env=env, stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
        try:
            wait_for(lambda: proc.poll() is None and _status(port, "/readyz") == 200, 60, "the consumer ready (partitions assigned)")
            assert _status(port, "/healthz") == 200
            order_id = f"readme-{unique}"
            payload = {"order_id": order_id, "customer_id": "c-1", "items": [{"sku": "A", "quantity": 1, "unit_price_cents": 500}],
                       "total_cents": 500, "placed_at": datetime.now(timezone.utc), "currency": "EUR", "coupon": None}  # fmt: skip
            with psycopg.connect(settings.database_url) as conn, conn.transaction():
                event = outbox.emit(conn, "order", order_id, "OrderPlaced", payload, traceparent=f"00-{TRACE_ID}-00f067aa0ba902b7-01")

            def handled() -> list[dict]:
                lines = [json.loads(x) for x in log_path.read_text().splitlines() if x.startswith("{")]
                return [r for r in lines if r["logger"] == "consumers.charges" and r.get("event_id") == str(event.id)]

            wait_for(lambda: bool(handled()), 60, "the handler's log line for the emitted event")
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
    line = handled()[0]
    assert line["msg"] == f"charged order {order_id}" and line["level"] == "info"
    assert (line["group"], line["event_type"], line["trace_id"], line["topic"]) == (group, "OrderPlaced", TRACE_ID, "outbox.event.order")
    assert isinstance(line["partition"], int) and isinstance(line["offset"], int)
    assert (folder / "closed").read_text() == "db"  # the shutdown hook ran on SIGTERM
    assert redis_client.hget(f"{{order:{order_id}}}:charges", "n") == b"1"
    redis_client.delete(f"{{order:{order_id}}}:charges")
