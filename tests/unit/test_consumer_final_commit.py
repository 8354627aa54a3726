"""#12.12: shutdown commits, synchronously, every applied offset the broker has not confirmed, and
retries a failed final commit. The Kafka client is a stand-in that records what it is asked to
commit (the runtime's bookkeeping is what is under test; tests/integration/
test_consumer_shutdown_commit.py checks the end-to-end property with a real SIGTERM).

On the main this was written against, both tests failed: an asynchronous commit counted as done
when sent, so the final synchronous commit sent nothing, and its failure was not retried."""

from __future__ import annotations

import redis
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from postbox.consumer import App, ConsumerConfig, ConsumerRuntime
from postbox.consumer.partition_state import PartitionState


class StandInConsumer:
    """Records commits; the first ``failures`` synchronous ones fail like a coordinator that moved."""

    def __init__(self, failures: int = 0) -> None:
        self.calls: list[tuple[bool, list[tuple[str, int, int]]]] = []
        self.failures = failures

    def commit(self, *, offsets, asynchronous):
        self.calls.append((asynchronous, [(tp.topic, tp.partition, tp.offset) for tp in offsets]))
        if not asynchronous and self.failures:
            self.failures -= 1
            raise KafkaException(KafkaError(KafkaError.REQUEST_TIMED_OUT))
        return None if asynchronous else offsets

    def close(self) -> None:
        pass


def _runtime(consumer: StandInConsumer) -> ConsumerRuntime:
    app = App("g")
    app.catch_all(lambda e, fx: None)
    config = ConsumerConfig.load({}, group="g", topics="t", redis_url="redis://127.0.0.1:1/0", kafka_bootstrap="127.0.0.1:1",
                                 backoff_base_ms=1, backoff_max_ms=2)
    runtime = ConsumerRuntime(app, config, redis_client=redis.Redis(port=1), install_signals=False)
    runtime.consumer = runtime.partitions.consumer = consumer  # type: ignore[assignment]
    runtime.states[("t", 0)] = PartitionState("t", 0, done=40)
    runtime.states[("t", 1)] = PartitionState("t", 1, done=7)
    return runtime


def test_shutdown_commits_synchronously_what_an_async_commit_only_sent():
    consumer = StandInConsumer()
    runtime = _runtime(consumer)
    runtime.partitions.commit()  # steady state: sent asynchronously, no confirmation yet
    runtime.partitions.on_commit(None, [TopicPartition("t", 1, 7)])  # partition 1's confirmation arrived
    runtime._shutdown(commit=True)
    assert consumer.calls[0] == (True, [("t", 0, 40), ("t", 1, 7)])
    assert consumer.calls[1:] == [(False, [("t", 0, 40)])]  # the unconfirmed one, synchronously


def test_a_failed_final_commit_is_retried():
    consumer = StandInConsumer(failures=2)
    runtime = _runtime(consumer)
    runtime._shutdown(commit=True)
    sync = [offsets for asynchronous, offsets in consumer.calls if not asynchronous]
    assert sync == [[("t", 0, 40), ("t", 1, 7)]] * 3  # two refusals, then confirmed
    runtime.partitions.consumer = consumer = StandInConsumer()  # type: ignore[assignment]
    runtime.partitions.commit(sync=True)
    assert consumer.calls == []  # everything confirmed: nothing left to send
