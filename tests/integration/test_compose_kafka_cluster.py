"""The three Kafka nodes of infra/docker-compose.replicas.yml form one cluster and replicate as
the local stack's three-node topology: every topic three times, acks=all writes go on with one
node down and are refused with two.

No Docker engine runs here: tests/support/compose_kafka.py renders each node's server.properties
from its compose environment as the apache/kafka image does, formats it with the compose file's
cluster id and runs it from the local stack's jars of the same Kafka version, in a private network
namespace (the service names resolve to addresses of their own). Not the shared stack.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from postbox.stack.layout import StackLayout

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"),
                       reason="needs root, unshare and ip for a private network namespace"),
]


def test_the_compose_kafka_nodes_form_one_cluster_that_keeps_acks_all_writes_with_one_node_down(tmp_path):
    if not any(StackLayout.default().kafka_lib.glob("kafka_*.jar")):
        pytest.skip("the local stack's Kafka jars are not resolved (postbox up)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    done = subprocess.run(["unshare", "-mn", "--propagation", "private", "--", sys.executable, "-m", "tests.support.compose_kafka",
                           str(tmp_path / "nodes")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=420)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    evidence = json.loads(done.stdout.strip().splitlines()[-1])
    print(evidence)
    # One cluster of three, each broker advertised where the host reaches it (9092 + 2(i-1)).
    assert evidence["brokers"] == [[1, "127.0.0.1", 9092], [2, "127.0.0.1", 9094], [3, "127.0.0.1", 9096]]
    # A topic created with the defaults: three copies, two needed for acks=all.
    assert evidence["replicas"] == [3] and evidence["min_insync_replicas"] == "2"
    assert evidence["produce_all_up"] is None and evidence["produce_one_down"] is None
    assert evidence["produce_two_down"] is not None  # refused (or timed out), never kept on one copy
