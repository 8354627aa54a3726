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

