"""#15 CLI polish: the expected admin errors about a consumer group (authorization, a coordinator not
available or loading) are one line with the fix, from one mapping table in kafka_cluster, for
`describe_group` and `committed` (every incident command that looks at a group). The broker is a
stand-in here: these refusals need an ACL-enforcing or failing-over cluster; what is tested is
postbox's mapping of the broker's error codes."""

from __future__ import annotations

from concurrent.futures import Future

import pytest
from confluent_kafka import KafkaError, KafkaException

from postbox.errors import ConfigError, KafkaUnavailableError, PostboxError
from postbox.kafka_cluster import GROUP_ADMIN_ERRORS, Kafka


class _RefusingAdmin:
    """An AdminClient whose group requests fail with ``code`` (what confluent-kafka's futures raise)."""

    def __init__(self, code: int) -> None:
        self.code = code

    def _failed(self, key: str) -> dict[str, Future]:
        future: Future = Future()
        future.set_exception(KafkaException(KafkaError(self.code)))
        return {key: future}

    def describe_consumer_groups(self, groups, request_timeout=None):
        return self._failed(groups[0])

    def list_consumer_group_offsets(self, requests, request_timeout=None):
        return self._failed(requests[0].group_id)

    def poll(self, _timeout):
        return 0


def _kafka(code: int) -> Kafka:
    kafka = Kafka("broker:9092", timeout=1)
    kafka._admin = _RefusingAdmin(code)  # type: ignore[assignment]
    return kafka


CASES = [
    (KafkaError.GROUP_AUTHORIZATION_FAILED, ConfigError, "not authorized", "--operation Describe --group billing"),
    (KafkaError.TOPIC_AUTHORIZATION_FAILED, ConfigError, "not authorized", "--operation Describe --topic"),
    (KafkaError.CLUSTER_AUTHORIZATION_FAILED, ConfigError, "not authorized", "--operation Describe --cluster"),
    (KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaUnavailableError, "coordinator of consumer group billing is not available", "__consumer_offsets"),
    (KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaUnavailableError, "still loading", "retry in a few seconds"),
    (KafkaError.NOT_COORDINATOR, KafkaUnavailableError, "no longer the coordinator", "retry"),
]


@pytest.mark.parametrize(("code", "kind", "says", "fix"), CASES, ids=[KafkaError(c[0]).name() for c in CASES])
@pytest.mark.parametrize("ask", ["describe_group", "committed"])
def test_a_refused_group_request_is_one_line_with_the_fix(code, kind, says, fix, ask):
    with pytest.raises(kind) as caught:
        getattr(_kafka(code), ask)("billing")
    error = caught.value
    assert says in error.message and "billing" in error.message and "\n" not in error.message
    assert error.fix is not None and fix in error.fix


def test_every_mapped_code_is_an_error_with_a_fix():
    assert len(GROUP_ADMIN_ERRORS) >= 6
    for code, (kind, message, fix) in GROUP_ADMIN_ERRORS.items():
        assert issubclass(kind, PostboxError) and "{group}" in message and fix, KafkaError(code).name()


def test_a_group_that_does_not_exist_is_an_empty_group_not_an_error():
    info = _kafka(KafkaError.GROUP_ID_NOT_FOUND).describe_group("billing")
    assert (info.state, info.members) == ("DEAD", [])


class _ReadOnlyAdmin(_RefusingAdmin):
    """A principal that may describe the (empty) group but not commit its offsets: `replay --execute`."""

    def describe_consumer_groups(self, groups, request_timeout=None):
        future: Future = Future()
        future.set_exception(KafkaException(KafkaError(KafkaError.GROUP_ID_NOT_FOUND)))
        return {groups[0]: future}

    def alter_consumer_group_offsets(self, requests, request_timeout=None):
        return self._failed(requests[0].group_id)


@pytest.mark.parametrize("code", [KafkaError.GROUP_AUTHORIZATION_FAILED, KafkaError.TOPIC_AUTHORIZATION_FAILED])
def test_a_refused_offset_reset_names_the_acl_it_needs(code):
    """Found by review: `replay --execute` refused for authorization said "the broker refused the
    offset reset ... KafkaError{...}" with the fix "check that the group has no members"; the
    reset needs Read on the group and its topics, which the one table of group errors now says."""
    from postbox.incident.offsets import Move, ResetPlan, Target, apply_reset

    kafka = Kafka("broker:9092", timeout=1)
    kafka._admin = _ReadOnlyAdmin(code)  # type: ignore[assignment]
    plan = ResetPlan("billing", Target("earliest"), [Move("outbox.event.order", 0, 5, 0, 0, 9)], [], "EMPTY")
    with pytest.raises(ConfigError) as caught:
        apply_reset(kafka, plan)
    error = caught.value
    assert "not authorized" in error.message and "billing" in error.message and "\n" not in error.message
    assert error.fix is not None and "--operation Read" in error.fix and "no members" not in error.fix
