"""#15.1 "Commands that work on the stack they describe" and #15.2 "the CLI hands the local stack's
addresses to Settings": the real commands, run with none of the URL variables set, on this
worktree's stack (moved ports: a command that guessed 5432/6379 would miss it)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.integration.incident_support import CLI, ROOT

# disruptive (runs alone, after the tests that share the stack): its `db retention --dry-run` plans read the stack's partitions, slot and holds, and take the retention lock.
pytestmark = [pytest.mark.integration, pytest.mark.disruptive]

#: What `postbox env` exports; stripped so that a command can only find the stack by itself.
URL_VARS = (
    "POSTBOX_DATABASE_URL", "POSTBOX_KAFKA_BOOTSTRAP", "POSTBOX_REDIS_URL", "POSTBOX_CONNECT_URL",
    "POSTBOX_MAINT_DATABASE_URL", "POSTBOX_ADMIN_DATABASE_URL", "POSTBOX_REDIS_APPENDFSYNC",
)  # fmt: skip


def bare_env(**extra: str) -> dict[str, str]:
    """This process's environment without any of the URL variables (the stack's ports stay)."""
    kept = {k: v for k, v in os.environ.items() if k not in URL_VARS}
    return {**kept, "PYTHONPATH": str(ROOT), "COLUMNS": "200", **extra}


def run_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, env=env, timeout=120)


def test_consume_finds_the_local_stack_s_redis_user_with_no_variables_set():
    done = run_cli("consume", "tests.apps.counting:strict", "--group", "g", "--topics", "outbox.event.x", "--check", env=bare_env())
    assert done.returncode == 0, done.stderr
    config = json.loads(done.stdout)
    assert config["sources"]["redis_url"] == "local stack"
    assert config["config"]["redis_url"].startswith("redis://postbox_consumer:***@127.0.0.1:")
    assert config["config"]["redis_url"].endswith(f":{os.environ.get('POSTBOX_REDIS_PORT', '6379')}/0")


def test_db_status_and_retention_use_the_stack_s_port_and_generated_password():
    """The documented cron line `postbox db retention`, with nothing set: the stack's postbox_maint."""
    status = run_cli("db", "status", "--json", env=bare_env())
    assert status.returncode == 0, status.stderr
    assert any(p["is_default"] for p in json.loads(status.stdout))
    retention = run_cli("db", "retention", "--dry-run", "--json", env=bare_env())
    assert retention.returncode == 0, retention.stderr
    assert "partitions" in json.loads(retention.stdout)


def test_without_a_local_stack_db_commands_name_the_setting_to_set(tmp_path):
    """Elsewhere (no state folder here, no variable): one line naming POSTBOX_MAINT_DATABASE_URL,
    exit 1, and no connection attempt to a guessed 127.0.0.1:5432."""
    for command in (("db", "status"), ("db", "retention", "--dry-run"), ("db", "republish")):
        done = run_cli(*command, env=bare_env(POSTBOX_STATE_DIR=str(tmp_path / "no-stack")))
        assert done.returncode == 1, (command, done.stdout, done.stderr)
        assert "POSTBOX_MAINT_DATABASE_URL" in done.stderr and "Traceback" not in done.stderr, done.stderr
        assert "5432" not in done.stderr


def test_postbox_env_exports_the_maintenance_url_that_db_retention_accepts():
    exported = run_cli("env", env=bare_env())
    assert exported.returncode == 0, exported.stderr
    lines = dict(line.removeprefix("export ").split("=", 1) for line in exported.stdout.splitlines() if line.startswith("export "))
    maint = lines["POSTBOX_MAINT_DATABASE_URL"].strip("'")
    assert maint.startswith("postgresql://postbox_maint:") and f":{os.environ.get('POSTBOX_PG_PORT', '5432')}/" in maint
    done = run_cli("db", "retention", "--dry-run", "--json", env={**bare_env(), "POSTBOX_MAINT_DATABASE_URL": maint,
                                                                   "POSTBOX_STATE_DIR": "/nonexistent-postbox-state"})
    assert done.returncode == 0, done.stderr


def test_db_retention_takes_durations_as_every_other_command_does():
    """#15.2 one duration parser: `--keep 172800` (bare seconds) and `--lock-timeout 1m` were refused
    by retention's own parser ("not a positive number followed by m, h, d or w" / "not a number of
    seconds"); they mean what they mean everywhere else, and bad ones are usage errors naming the flag."""
    seconds = run_cli("db", "retention", "--keep", "172800", "--lock-timeout", "1m", "--dry-run", "--json", env=bare_env())
    assert seconds.returncode == 0, seconds.stderr
    days = run_cli("db", "retention", "--keep", "2d", "--lock-timeout", "60s", "--dry-run", "--json", env=bare_env())
    assert days.returncode == 0, days.stderr
    plan = ("created", "dropped", "kept", "skipped")
    assert {k: json.loads(seconds.stdout)[k] for k in plan} == {k: json.loads(days.stdout)[k] for k in plan}
    for flag, value in (("--keep", "2 days"), ("--lock-timeout", "0s"), ("--partition-width", "-1d")):
        bad = run_cli("db", "retention", flag, value, "--dry-run", env=bare_env())
        assert bad.returncode == 2 and flag in bad.stderr and "Traceback" not in bad.stderr, (flag, bad.stderr)


def test_trace_reads_the_outbox_row_as_the_stack_s_maintenance_role(pg_conn, unique):
    """`trace` needs a role that may read the outbox (the app role may only insert): with nothing
    set, the CLI hands it the local stack's postbox_maint (trace.py no longer reads secrets.env)."""
    from tests.support.outbox_rows import insert_event

    with pg_conn.transaction():
        event_id = insert_event(pg_conn, f"findstack{unique}", "a-1", "Probe", b"{}")
    done = run_cli("trace", event_id, "--json", "--no-redis-scan", env=bare_env())
    outbox = json.loads(done.stdout)["outbox"]
    assert outbox["state"] == "found" and outbox["source"] == "local stack (postbox_maint)", outbox
