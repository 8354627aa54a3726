"""Redis Cluster failover under load: three masters with a replica each (private processes on
loopback, started by tests/support/redis_servers.py), reached by the consumer through a
``redis+cluster://`` URL. A master is SIGKILLed under the fault suite's writer load; its replica
takes over; the records whose slots live on the other masters keep being applied while it does.
Verdict as in test_faults.py: 0 lost, 0 applied twice, order per aggregate kept, and the recovery
time (kill → the first event committed after the kill applied; and for the dead master's slots,
kill → the first of theirs committed after the kill applied on the promoted replica).

Not ``disruptive``: PostgreSQL, Debezium and Kafka are the shared stack's, used as every
integration test uses them; the only processes killed are the scenario's own.
"""

from __future__ import annotations

import pytest

from tests.faults.redis_cluster_failover import ClusterFailoverRun

pytestmark = [pytest.mark.integration]


@pytest.mark.timeout(600)
def test_a_master_dies_its_replica_takes_over_and_the_other_masters_slots_keep_flowing(tmp_path, show):
    # batch_size 200: up to 800 held records per partition before it pauses (a slow election on a
    # busy host must not stop the other masters' records of that partition)
    run = ClusterFailoverRun("cluster", tmp_path / "cluster", log=show, partitions=2, aggregates=36, batch_size=200)
    try:
        run.start()
        run.steady(2)
        run.kill_master()
        run.steady(2)
        verdict = run.verdict()
        show("\n" + verdict.report())
        assert not verdict.violations, verdict.report()
        assert verdict.applied == verdict.committed, verdict.report()
        _took_over, during, _flowing, _own = run.window
        assert all(n > 0 for n in during.values()), f"the other masters' slots did not flow while the replica took over: {during}"
    finally:
        run.close()
