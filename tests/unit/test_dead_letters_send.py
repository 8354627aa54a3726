"""DeadLetters.send, what stands between a permanently failed record and its partition moving on.

The runtime commits past a failed record only when ``send`` says its dead letter is acknowledged
(``None`` at the record's index); anything else holds the partition at that record. So every path
of ``send`` is checked here on the real class, with a stand-in producer and admin client (Kafka's
clients are collaborators; the DLQ records a broker really takes are in
tests/integration/test_consumer_failures.py and the fault suite): acknowledged letters, refused and
unacknowledged ones, a record too large for the dead-letter topic sent again reference-only, a
dead-letter topic Kafka cannot create or describe, outcomes at their item's index whatever the
mix, and the topic's limits read again after an error (an operator may have fixed them).
"""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

from postbox.consumer.deadletter import DLQ_HEADROOM_BYTES, H_ORIGINAL_BYTES, DeadLetters, Failure, Origin
from tests.support.dead_letter_clients import LOST, StandInAdmin, StandInProducer

T, U = "outbox.event.order", "outbox.event.payment"
FAILURE = Failure("HandlerError:ValueError", "no such order")


def origin(offset: int, *, topic: str = T, partition: int = 0, value: bytes = b'{"n": 1}') -> Origin:
    return Origin(topic, partition, offset, b"order:%d" % offset, value, [("id", b"e-%d" % offset), ("event_type", b"OrderPlaced")])


def dead_letters(producer: StandInProducer, admin: StandInAdmin) -> DeadLetters:
    return DeadLetters("unused:9092", "billing", producer=producer, admin=admin, delivery_timeout_s=0.1)  # type: ignore[arg-type]


def kafka_error(code: int) -> KafkaError:
    return KafkaError(code)


# -- acknowledged ------------------------------------------------------------------------------------


def test_acknowledged_dead_letters_are_none_and_carry_the_original_record_to_its_partition() -> None:
    admin = StandInAdmin({T: (3, 1_000_000), T + ".dlq": (3, 1_064_536)})
    producer = StandInProducer()
    items = [(origin(7, partition=2), FAILURE), (origin(8, partition=0), FAILURE)]
    assert dead_letters(producer, admin).send(items) == [None, None]
    first, second = producer.produced
    assert (first.topic, first.partition, first.key, first.value) == (T + ".dlq", 2, b"order:7", b'{"n": 1}')
    assert second.partition == 0
    assert first.header("id") == b"e-7" and first.header("postbox.error.class") == b"HandlerError:ValueError"
    assert first.header("postbox.group") == b"billing" and not first.reference_only


def test_a_dead_letter_topic_with_fewer_partitions_takes_the_record_on_any_of_them() -> None:
    admin = StandInAdmin({T: (6, 1_000_000), T + ".dlq": (2, 1_064_536)})
    producer = StandInProducer()
    assert dead_letters(producer, admin).send([(origin(1, partition=5), FAILURE), (origin(2, partition=1), FAILURE)]) == [None, None]
    assert [p.partition for p in producer.produced] == [None, 1]  # None: the producer's partitioner picks


def test_a_missing_dead_letter_topic_is_created_like_its_origin_with_headroom() -> None:
    admin = StandInAdmin({T: (4, 2_000_000)})
    assert dead_letters(StandInProducer(), admin).send([(origin(0), FAILURE)]) == [None]
    (new,) = admin.created
    assert (new.topic, new.num_partitions, new.replication_factor) == (T + ".dlq", 4, 1)
    assert new.config == {"max.message.bytes": str(2_000_000 + DLQ_HEADROOM_BYTES)}


# -- refused, unacknowledged: each outcome at its own index ------------------------------------------


def test_each_outcome_is_at_its_items_index_whatever_the_mix() -> None:
    """Acknowledged, refused by the broker, no report within the delivery timeout, refused by the
    producer's queue, acknowledged: the runtime holds exactly the partitions of the failed ones."""
    answers = {1: None, 2: kafka_error(KafkaError._MSG_TIMED_OUT), 3: LOST, 5: None}
    admin = StandInAdmin({T: (1, 1_000_000), T + ".dlq": (1, 1_064_536)})
    producer = StandInProducer(answer=lambda p: answers[p.offset],
                               refuse=lambda p: BufferError("Local: Queue full") if p.offset == 4 else None)
    outcome = dead_letters(producer, admin).send([(origin(o), FAILURE) for o in (1, 2, 3, 4, 5)])
    assert outcome[0] is None and outcome[4] is None
    assert outcome[1] is not None and outcome[1].startswith("DLQ produce failed:") and "Message timed out" in outcome[1]
    assert outcome[2] == "not acknowledged within the delivery timeout"
    assert outcome[3] is not None and outcome[3].startswith("DLQ produce refused:") and "Queue full" in outcome[3]
    assert [p.offset for p in producer.produced] == [1, 2, 3, 4, 5], "each sent once, in order"


def test_a_producer_that_raises_kafka_exception_is_an_error_for_that_item_only() -> None:
    admin = StandInAdmin({T: (1, 1_000_000), T + ".dlq": (1, 1_064_536)})
    producer = StandInProducer(refuse=lambda p: KafkaException(kafka_error(KafkaError._UNKNOWN_TOPIC)) if p.offset == 1 else None)
    outcome = dead_letters(producer, admin).send([(origin(0), FAILURE), (origin(1), FAILURE), (origin(2), FAILURE)])
    assert outcome[0] is None and outcome[2] is None
    assert outcome[1] is not None and "DLQ produce refused" in outcome[1]


# -- too large ---------------------------------------------------------------------------------------


def test_a_record_the_broker_refuses_as_too_large_is_sent_again_reference_only() -> None:
    """The topic's limit said it fits, the broker said otherwise (its own message.max.bytes, a
    limit changed since it was read): the dead letter goes again without the value, saying where
    the original is, and the record leaves its partition."""
    admin = StandInAdmin({T: (1, 1_000_000), T + ".dlq": (1, 1_064_536)})
    big = b"x" * 50_000
    producer = StandInProducer(answer=lambda p: kafka_error(KafkaError.MSG_SIZE_TOO_LARGE) if p.value == big else None)
    outcome = dead_letters(producer, admin).send([(origin(0), FAILURE), (origin(1, value=big), FAILURE), (origin(2), FAILURE)])
    assert outcome == [None, None, None]
    assert [(p.offset, p.reference_only) for p in producer.produced] == [(0, False), (1, False), (2, False), (1, True)]
    resent = producer.produced[-1]
    assert resent.value is None and resent.header(H_ORIGINAL_BYTES) == str(origin(1, value=big).size).encode()
    assert resent.key == b"order:1" and resent.header("id") == b"e-1"
    assert f"stays at {T}[0]@1" in (resent.header("postbox.error") or b"").decode()


def test_a_record_the_producer_refuses_as_too_large_is_sent_again_reference_only() -> None:
    admin = StandInAdmin({T: (1, 1_000_000), T + ".dlq": (1, 1_064_536)})
    too_large = KafkaException(kafka_error(KafkaError.MSG_SIZE_TOO_LARGE))
    producer = StandInProducer(refuse=lambda p: too_large if p.value is not None and len(p.value) > 1000 else None)
    assert dead_letters(producer, admin).send([(origin(3, value=b"y" * 5000), FAILURE)]) == [None]
    assert [p.reference_only for p in producer.produced] == [False, True]


def test_a_record_over_the_topics_known_limit_goes_reference_only_at_once() -> None:
    admin = StandInAdmin({T: (1, 1_000_000), T + ".dlq": (1, 4_000)})
    producer = StandInProducer()
    assert dead_letters(producer, admin).send([(origin(0, value=b"z" * 10_000), FAILURE)]) == [None]
    (only,) = producer.produced
    assert only.reference_only and only.value is None
    assert "more than the 4,000 bytes" in (only.header("postbox.error") or b"").decode()


def test_a_reference_only_letter_refused_too_is_an_error_naming_the_topic_and_its_limit() -> None:
    """Sent twice at most (no loop): the error says the topic takes too little even for the
    metadata and how to fix it, and the runtime holds the partition there."""
    admin = StandInAdmin({T: (1, 1_000_000), T + ".dlq": (1, 1_064_536)})
    producer = StandInProducer(answer=lambda p: kafka_error(KafkaError.MSG_SIZE_TOO_LARGE))
    (error,) = dead_letters(producer, admin).send([(origin(0), FAILURE)])
    assert [p.reference_only for p in producer.produced] == [False, True]
    assert error is not None and "DLQ produce failed" in error
    assert f"does not fit {T}.dlq, which takes 1,064,536" in error and "raise its max.message.bytes" in error


# -- the dead-letter topic ---------------------------------------------------------------------------


def test_a_dead_letter_topic_kafka_cannot_create_fails_only_the_records_of_its_topic() -> None:
    admin = StandInAdmin({T: (1, 1_000_000), U: (1, 1_000_000), U + ".dlq": (1, 1_064_536)})
    admin.refuse_create.add(T + ".dlq")
    producer = StandInProducer()
    outcome = dead_letters(producer, admin).send([(origin(0), FAILURE), (origin(0, topic=U), FAILURE), (origin(1), FAILURE)])
    assert outcome[1] is None
    for error in (outcome[0], outcome[2]):
        assert error is not None and error.startswith(f"cannot create or describe dead-letter topic {T}.dlq")
        assert "TOPIC_AUTHORIZATION_FAILED" in error
    assert [p.topic for p in producer.produced] == [U + ".dlq"]


def test_a_dead_letter_topic_without_partitions_yet_is_an_error_not_a_guess() -> None:
    admin = StandInAdmin({T: (1, 1_000_000), T + ".dlq": (0, 1_064_536)})
    producer = StandInProducer()
    (error,) = dead_letters(producer, admin).send([(origin(0), FAILURE)])
    assert error == f"dead-letter topic {T}.dlq has no partitions in the metadata yet"
    assert not producer.produced


def test_a_topics_limits_are_read_once_while_letters_go_through_and_again_after_an_error() -> None:
    """An operator who raises a too-small dead-letter topic's max.message.bytes after a refusal
    gets the full record on the retry: the limit is read again after any error, not cached for
    the process's life; while dead letters go through it is read once."""
    admin = StandInAdmin({T: (1, 1_000_000), T + ".dlq": (1, 4_000)})
    refused = {"on": True}
    producer = StandInProducer(answer=lambda p: kafka_error(KafkaError._MSG_TIMED_OUT) if refused["on"] else None)
    letters = dead_letters(producer, admin)
    big = origin(9, value=b"v" * 10_000)
    (error,) = letters.send([(big, FAILURE)])
    assert error is not None and producer.produced[-1].reference_only
    admin.topics[T + ".dlq"] = (1, 1_000_000)  # the operator raises the limit
    refused["on"] = False
    assert letters.send([(big, FAILURE)]) == [None]
    assert not producer.produced[-1].reference_only and producer.produced[-1].value == big.value
    reads = admin.described.count(T + ".dlq")
    assert letters.send([(origin(10), FAILURE)]) == [None] and letters.send([(origin(11), FAILURE)]) == [None]
    assert admin.described.count(T + ".dlq") == reads, "read again although every letter went through"
