"""#13.2 "an admin connection for the application's own DDL: `postbox env` (and the README
walkthrough) say how a user creates business tables, since the app role may not".

`postbox env --compose` printed POSTBOX_ADMIN_DATABASE_URL, the local stack's `postbox env` did
not: a new user following README's "Add postbox to your service" against the local stack (as it
invites) had no admin URL for step 2 (`postbox db init` said "no admin database URL") nor for
step 3 (their own tables). Found by following that section from a fresh folder; this test fails
on the main before the fix (db init exits 1).
"""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.integration.incident_support import CLI, ROOT

# disruptive (runs alone, after the tests that share the stack): `postbox db init` on the stack's database locks the outbox and re-sets its publication and grants.
pytestmark = [pytest.mark.integration, pytest.mark.disruptive]
SETTINGS = ("POSTBOX_DATABASE_URL", "POSTBOX_KAFKA_BOOTSTRAP", "POSTBOX_REDIS_URL", "POSTBOX_CONNECT_URL", "POSTBOX_ADMIN_DATABASE_URL")


def test_postbox_env_gives_a_fresh_folder_the_admin_connection_for_db_init_and_ddl(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import os, psycopg\n"
        "with psycopg.connect(os.environ['POSTBOX_ADMIN_DATABASE_URL']) as c:\n"
        "    print(c.execute(\"SELECT current_database(), rolcreaterole FROM pg_roles WHERE rolname = current_user\").fetchone())\n"
    )
    postbox = " ".join(CLI[:2]) + f" '{CLI[2]}'"
    command = f'eval "$(cd {ROOT} && {postbox} env)" && {postbox} db init && {CLI[0]} {probe}'
    env = {k: v for k, v in os.environ.items() if k not in SETTINGS}
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "nothing to change" in done.stdout  # the stack's outbox, found through the exported admin URL
    assert "('postbox', True)" in done.stdout  # the database the connector reads, as a role that may run DDL and grants
