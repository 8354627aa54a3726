"""Redis failover under load: a primary, a replica and three Sentinels (private processes on
loopback, started by tests/support/replicated_redis.py); the consumer reaches them through a
``redis+sentinel://`` URL. The primary is SIGKILLed under the fault suite's writer load; the
Sentinels promote the replica; the consumer follows it without a restart. Verdict as in
test_faults.py: 0 lost, 0 applied twice, order per aggregate kept, and the recovery time (kill →
the first event committed after the kill applied).

Not ``disruptive``: PostgreSQL, Debezium and Kafka are the shared stack's, used as every
integration test uses them; the only processes killed are the scenario's own.

The hole the replica wait closes (``--redis-replicas``): Redis replicates asynchronously, so an
apply the primary acknowledged may be on no replica when it dies. With the waits off (0), the
offsets of such applies are committed and a failover loses them for good; with the waits on
(``auto``: one replica), the same applies are not committed, so they come back after the failover
and are applied on the promoted primary.
"""

from __future__ import annotations

import pytest

from tests.faults.failover import RedisFailoverRun
from tests.faults.harness import Verdict

pytestmark = [pytest.mark.integration]


@pytest.fixture
def failover_run(tmp_path, show):
    runs: list[RedisFailoverRun] = []

    def make(scenario: str, **kwargs) -> RedisFailoverRun:
        run = RedisFailoverRun(scenario, tmp_path / scenario, log=show, **kwargs)
        runs.append(run)
        return run.start()

    yield make
    for run in runs:
        run.close()


def _check(verdict: Verdict, show) -> None:
    show("\n" + verdict.report())
    assert not verdict.violations, verdict.report()
    assert verdict.applied == verdict.committed, verdict.report()


@pytest.mark.timeout(600)
def test_sentinel_promotes_the_replica_and_the_consumer_follows(failover_run, show):
    run = failover_run("sentinel")
    run.steady(2)
    old = run.topology.current_primary().port
    run.kill_primary()
    run.steady(2)
    assert run.topology.current_primary().port != old
    _check(run.verdict(), show)


@pytest.mark.timeout(600)
def test_without_replica_waits_a_failover_loses_acknowledged_events(failover_run, show):
    """The hole: ``--redis-replicas 0``. The replica is held back, the consumer's applies after
    that are acknowledged by the primary alone and committed, the primary dies: the promoted
    replica never had them, and Kafka will not send them again. The verdict must find them lost
    (and nothing applied twice)."""
    run = failover_run("nowait", replicas="0")
    run.steady(2)
    run.kill_primary(hold_replica=True)
    run.steady(1)
    verdict = run.verdict(until_consumed=True)
    show("\n(replica waits off: this run is expected to lose events, its FAIL below is the hole shown)\n" + verdict.report())
    held = run.held
    assert held is not None and held.committed > 0 and held.out_buffer > 0, held
    lost = [v for v in verdict.violations if v.startswith("lost")]
    assert lost, "no acknowledged event was lost: the window was not opened"
    assert len(lost) == len(verdict.violations), verdict.report()  # lost, never applied twice or out of order
    show(f"   evidence: {len(lost)} committed events lost with the primary (replica waits off)")


@pytest.mark.timeout(600)
def test_with_replica_waits_the_same_failover_loses_nothing(failover_run, show):
    """The same kill with the default ``auto`` (one replica waited for): the applies the replica
    could not have are not confirmed, so nothing of them is committed; after the failover they
    are delivered again and applied on the promoted primary.

    Before the replica wait the engine waited for no replica, which is ``--redis-replicas 0``:
    the test above is this one on that engine, and loses events."""
    run = failover_run("waits")
    run.steady(2)
    run.kill_primary(hold_replica=True)
    run.steady(1)
    held = run.held
    assert held is not None and held.applied > 0 and held.out_buffer > 0, held
    assert held.committed == 0, f"records committed while the replica could not have them: {held}"
    _check(run.verdict(), show)
