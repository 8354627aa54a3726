"""Kafka and Connect failover under load, on private multi-node topologies started by the stack's
own code (``postbox up --kafka-nodes 3`` / ``--connect-workers 2`` in a state folder of the
test's): a broker leader and the group coordinator SIGKILLed (3 KRaft nodes, replication factor
3, ``min.insync.replicas=2``), and the Connect worker running the connector's task SIGKILLed (2
workers). Verdict as in test_faults.py: 0 lost, 0 applied twice, order per aggregate kept, and the
recovery time (kill → the first event committed after the kill applied).

Not ``disruptive``: PostgreSQL and Redis are the shared stack's, used as every integration test
uses them (the connector has its own name, replication slot and topic prefix, the slot dropped at
the end); the only processes killed are the scenario's own.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from tests.faults.kafka_failover import ConnectFailoverRun, KafkaFailoverRun
from tests.faults.harness import Verdict
from tests.integration.incident_support import run_cli

pytestmark = [pytest.mark.integration]


def _check(verdict: Verdict, show) -> None:
    show("\n" + verdict.report())
    assert not verdict.violations, verdict.report()
    assert verdict.applied == verdict.committed, verdict.report()


@pytest.mark.timeout(900)
def test_kafka_leader_then_coordinator_sigkilled_on_three_nodes(tmp_path, show):
    run = KafkaFailoverRun("kafkanodes", tmp_path, log=show)
    try:
        run.start()  # inside the try: a start that fails still stops the cluster and drops its slot
        run.steady(2)
        run.kill_node("leader", partition=0)
        run.steady(1)
        run.kill_node("coordinator")
        run.steady(1)
        _check(run.verdict(), show)
    finally:
        run.close()


@pytest.mark.timeout(900)
def test_connect_task_moves_to_the_other_worker(tmp_path, show):
    since = datetime.now(timezone.utc) - timedelta(seconds=5)
    run = ConnectFailoverRun("connectwk", tmp_path, log=show)
    try:
        run.start()
        run.steady(2)
        run.kill_task_worker()
        run.steady(1)
        verdict = run.verdict()
        _check(verdict, show)
        _reconciled(run, since, verdict, show)
    finally:
        run.close()


def _reconciled(run: ConnectFailoverRun, since: datetime, verdict: Verdict, show) -> None:
    """`postbox reconcile` over the scenario's window sees what Debezium re-sent after the kill as
    doubled in Kafka and applied once, and nothing missing (real re-sends, not a second producer)."""
    until = datetime.now(timezone.utc) + timedelta(seconds=1)
    done = run_cli("reconcile", "--since", since.isoformat(), "--until", until.isoformat(), "--aggregate-type", run.aggregate_type,
                   "--group", run.group, "--kafka-bootstrap", run.cluster.bootstrap, "--json", timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(done.stdout)
    [group] = report["groups"]
    show(f"   reconcile: {report['events']} events, {report['kafka']['doubled']} doubled in Kafka, "
         f"{group['doubled_applied_once']} of them applied once, {report['missing']} missing")
    assert report["missing"] == 0 and report["kafka"]["missing"] == 0, report["findings"][:5]
    assert report["events"] == verdict.committed and group["applied"] == verdict.committed
    assert verdict.topic_duplicates > 0, "the kill re-sent nothing: no Debezium re-send to reconcile"
    assert report["kafka"]["doubled"] == group["doubled_applied_once"] > 0
    assert report["kafka"]["records"] - report["events"] == verdict.topic_duplicates
