"""The Redis and Sentinel processes of infra/docker-compose.replicas.yml fail over as the compose
file promises, on its own ports, through the consumer's URL from `postbox env --compose --replicas`.

No Docker engine runs here: tests/support/compose_redis.py starts each process by the project's
entrypoint script with its service's command line and environment, in a private network namespace
standing for the one the compose file's Redis processes share. The primary is SIGKILLed; the
replica must be promoted at the address the Sentinels hand out, the consumer's client must follow
without a new client, and the old primary, restarted, must come back as a replica (with the
login its entrypoint wrote and the role Sentinel rewrote into its file). Not the shared stack.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"),
                       reason="needs root, unshare and ip for a private network namespace"),
    pytest.mark.skipif(not shutil.which("redis-sentinel"), reason="needs Debian's redis-server and redis-sentinel"),
]


def test_the_compose_sentinels_promote_the_replica_at_an_address_the_host_reaches_and_the_consumer_follows(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    done = subprocess.run(["unshare", "-n", "--", sys.executable, "-m", "tests.support.compose_redis", str(tmp_path / "containers")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    evidence = json.loads(done.stdout.strip().splitlines()[-1])
    print(evidence)
    # Each service's healthcheck passes once the topology settled (depends_on waits on them).
    assert evidence["healthchecks_s"] < 30
    # What the Sentinels hand out is 127.0.0.1 and a published port: the replica, and each other.
    assert evidence["replicas"] == [["127.0.0.1", 6380]]
    assert evidence["sentinels"] == [["127.0.0.1", 26380], ["127.0.0.1", 26381]]
    assert evidence["promoted"] == ["127.0.0.1", 6380]
    assert evidence["wait_acked"] == 1  # WAIT 1 through the consumer's user: the replica had the write before the kill
    # The consumer's client (one client, no restart) read what was written before the kill, on the promoted primary.
    assert evidence["read_back"] == "before" and evidence["client_primary"] == ["127.0.0.1", 6380]
    # The old primary logged in to the promoted one, and keeps the role Sentinel gave it across a restart.
    assert evidence["old_primary_conf_replicaof"] == ["127.0.0.1 6380"]
