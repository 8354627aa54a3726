"""Defects found by trying this round's commands as a new user and an on-call engineer would
(piped, from a fresh folder, with nothing but the local stack): each test drives the real command
as a subprocess against this worktree's stack."""

from __future__ import annotations

import json

import pytest

from tests.integration.test_commands_find_their_stack import bare_env, run_cli

pytestmark = pytest.mark.integration


def test_doctor_on_the_local_stack_with_nothing_set_finds_redis_durable():
    """`postbox doctor` in a clone with the stack up and no variables set warned "redis persistence:
    none: cannot read the server's AOF settings (CONFIG GET refused ...)" while `postbox consume`
    on the same stack says "Redis effects are durable": the consumer's ACL user may not read CONFIG,
    and the stack's declared fsync policy (POSTBOX_REDIS_APPENDFSYNC, which `postbox env` prints)
    was handed to `consume` but not to `doctor`."""
    done = run_cli("doctor", "--json", env=bare_env())
    checks = {c["check"]: c for c in json.loads(done.stdout)["checks"]}
    persistence = checks["redis persistence"]
    assert persistence["status"] == "ok", persistence


def test_db_status_piped_prints_whole_partition_names_one_line_each():
    """Piped, `postbox db status` printed an 80-column box table whose partition names were cut
    (`outbox_p2026120…`), so none could be pasted into a psql command; like every listing command
    it prints TSV with full values when stdout is not a terminal, and takes --output."""
    names = [p["partition"] for p in json.loads(run_cli("db", "status", "--json", env=bare_env()).stdout)]
    piped = run_cli("db", "status", env=bare_env())
    assert piped.returncode == 0, piped.stderr
    lines = piped.stdout.splitlines()
    assert lines[0].split("\t")[0] == "partition", lines[:2]
    assert [line.split("\t")[0] for line in lines[1:]] == names
    table = run_cli("db", "status", "--output", "table", env=bare_env(COLUMNS="200"))
    assert table.returncode == 0 and all(name in table.stdout for name in names), table.stdout


def test_retention_dry_run_says_durations_as_they_were_typed():
    """`postbox db retention --dry-run` said "would ensure partitions 1 day, 0:00:00 wide up to
    7 days, 0:00:00 ahead" (Python's timedelta text); it says them as the flags take them."""
    done = run_cli("db", "retention", "--dry-run", "--partition-width", "36h", "--ahead", "7d", "--json", env=bare_env())
    assert done.returncode == 0, done.stderr
    assert "(dry run) would ensure partitions 1d 12h wide up to 7d ahead" in json.loads(done.stdout)["created"]
