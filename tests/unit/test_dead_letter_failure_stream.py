"""DeadLetters.record, the failure-stream write before a dead letter is sent: a Redis failure that
heals by waiting (an outage, a Redis Cluster failover) must come back as TransientEffectError, so
the runtime holds the record's partition there and retries; anything else raising out of it would
stop the consumer. A refused login stops it with the fix, as in the engine. A refusal that waiting
does not fix is logged and the dead letter goes on (the DLQ record is the complete record). The real failure stream is written in
tests/integration/test_consumer_failures.py; here a stand-in client raises what redis-py raises
(the same exceptions the engine's own classification is tested with in
test_effects_already_applied.py), so no cluster has to fail over."""

from __future__ import annotations

import logging

import pytest
import redis
from redis.exceptions import ClusterDownError, ClusterError, SlotNotCoveredError

from postbox.consumer.deadletter import DeadLetters, Failure, Origin
from postbox.effects import EffectsEngine
from postbox.errors import ConfigError, TransientEffectError


class FailingPipeline:
    """Takes the XADD/PEXPIRE calls and fails at execute, as redis-py's pipeline does."""

    def __init__(self, error: BaseException) -> None:
        self.error = error
        self.calls: list[str] = []

    def xadd(self, key: bytes, fields: dict, **_kw) -> None:
        self.calls.append("xadd")

    def pexpire(self, key: bytes, ms: int) -> None:
        self.calls.append("pexpire")

    def execute(self) -> list:
        raise self.error


class StandInClient:
    def __init__(self, error: BaseException) -> None:
        self.error = error
        self.pipelines: list[FailingPipeline] = []

    def pipeline(self, transaction: bool = True) -> FailingPipeline:
        pipe = FailingPipeline(self.error)
        self.pipelines.append(pipe)
        return pipe


def _record(error: BaseException) -> StandInClient:
    client = StandInClient(error)
    engine = EffectsEngine(client, "billing", functions_dir=None)  # type: ignore[arg-type]
    letters = DeadLetters("unused:9092", "billing", producer=object(), admin=object())  # type: ignore[arg-type]
    failure = Failure("HandlerError", "ValueError: no such order")
    letters.record(engine, [(Origin("orders.order", 2, 41, b"order:7", b"", []), "0193-e1", failure)])
    return client


@pytest.mark.parametrize(("error", "reason"), [
    (SlotNotCoveredError("Slot 8190 is not covered by the cluster."), "CLUSTERDOWN"),
    (ClusterError("TTL exhausted."), "CLUSTERDOWN"),
    (ClusterDownError("CLUSTERDOWN The cluster is down"), "CLUSTERDOWN"),
    (redis.ConnectionError("Connection refused"), "connection"),
    (redis.TimeoutError("Timeout reading from socket"), "connection"),
    (redis.BusyLoadingError("LOADING Redis is loading the dataset in memory"), "LOADING"),
    (redis.ResponseError("OOM command not allowed when used memory > 'maxmemory'."), "OOM"),
], ids=["slot-not-covered", "ttl-exhausted", "clusterdown", "connection", "timeout", "loading", "oom"])
def test_a_failure_that_heals_by_waiting_holds_the_record(error: BaseException, reason: str) -> None:
    with pytest.raises(TransientEffectError) as caught:
        _record(error)
    assert caught.value.reason == reason
    assert "failure stream" in str(caught.value) or "failure-stream" in str(caught.value)


@pytest.mark.parametrize("error", [
    redis.AuthenticationError("WRONGPASS invalid username-password pair or user is disabled."),
    redis.ConnectionError("Error 1 connecting to 127.0.0.1:6380. [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed"),
], ids=["credentials-revoked", "tls-certificate"])
def test_a_refused_login_stops_the_consumer_with_the_fix(error: BaseException) -> None:
    """As in the effects engine: no retry fixes revoked credentials or a wrong CA, so it is the
    configuration error the runtime stops on (exit 3), not a connection outage retried for ever."""
    with pytest.raises(ConfigError) as caught:
        _record(error)
    assert caught.value.fix, "the error names its fix"


def test_a_refusal_that_waiting_does_not_fix_is_logged_and_the_dead_letter_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="postbox.consumer.dlq"):
        client = _record(redis.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"))
    assert client.pipelines[0].calls == ["xadd", "pexpire"]
    assert "WRONGTYPE" in caplog.text
    assert "DLQ record is the complete record" in caplog.text


def test_failures_the_engine_recorded_are_not_written_again() -> None:
    client = StandInClient(AssertionError("the failure stream was written twice"))
    engine = EffectsEngine(client, "billing", functions_dir=None)  # type: ignore[arg-type]
    letters = DeadLetters("unused:9092", "billing", producer=object(), admin=object())  # type: ignore[arg-type]
    letters.record(engine, [(Origin("orders.order", 0, 7, b"order:8", b"", []), "0193-e2", Failure("EffectError", "WRONGTYPE", recorded=True))])
    assert client.pipelines == []
