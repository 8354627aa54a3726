"""#14.3 static membership: the default instance name is stable across a restart and unique per host."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from postbox.consumer import instance
from postbox.consumer.config import ConsumerConfig
from postbox.errors import ConfigError


@pytest.fixture(autouse=True)
def _release():
    yield
    instance.release_all()


def test_two_claims_on_one_host_get_different_names_and_a_released_name_is_taken_back(tmp_path):
    first = instance.claim_default("billing", host="web-1", folder=tmp_path)
    second = instance.claim_default("billing", host="web-1", folder=tmp_path)
    assert (first, second) == ("web-1-billing-0", "web-1-billing-1")
    instance.release_all()  # what the kernel does for a SIGKILLed process
    assert instance.claim_default("billing", host="web-1", folder=tmp_path) == "web-1-billing-0"


def test_a_name_held_by_another_live_process_is_not_reused(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, pathlib
            from postbox.consumer import instance
            print(instance.claim_default("billing", host="web-1", folder=pathlib.Path({str(tmp_path)!r})), flush=True)
            sys.stdin.read()
        """)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "web-1-billing-0"
        assert instance.claim_default("billing", host="web-1", folder=tmp_path) == "web-1-billing-1"
    finally:
        holder.kill()
        holder.wait()
    instance.release_all()
    assert instance.claim_default("billing", host="web-1", folder=tmp_path) == "web-1-billing-0"  # the dead holder's name


def test_the_default_name_has_only_characters_kafka_accepts(tmp_path):
    name = instance.claim_default("orders", "shop app", host="host:with/odd chars", folder=tmp_path)
    assert instance.is_valid(name) and name.startswith("host-with-odd-chars-shop-app-orders-")


def test_config_sends_group_instance_id_only_for_a_static_member():
    base = ConsumerConfig.load({}, group="g", topics="outbox.event.x")
    assert base.instance_id is None and "group.instance.id" not in base.kafka_client_configs()[0]
    static = ConsumerConfig.load({"POSTBOX_INSTANCE_ID": "web-1-g-0"}, group="g", topics="outbox.event.x")
    assert static.kafka_client_configs()[0]["group.instance.id"] == "web-1-g-0"
    off = ConsumerConfig.load({"POSTBOX_INSTANCE_ID": "none"}, group="g", topics="outbox.event.x").with_default_instance()
    assert off.static_instance_id is None and "group.instance.id" not in off.kafka_client_configs()[0]


def test_static_membership_is_the_default_of_postbox_consume_and_none_turns_it_off():
    """#14.3: unset claims the per-host name (a SIGKILLed process restarted gets its partitions back
    at once); a fence after a broker restart is answered by a rejoin (postbox.consumer.fencing)."""
    unset = ConsumerConfig.load({}, group="g", topics="outbox.event.x").with_default_instance("app")
    assert unset.static_instance_id is not None and unset.kafka_client_configs()[0]["group.instance.id"] == unset.static_instance_id
    assert unset.source("instance_id").startswith("default")
    auto = ConsumerConfig.load({"POSTBOX_INSTANCE_ID": "auto"}, group="g", topics="outbox.event.x").with_default_instance("app")
    assert auto.static_instance_id is not None and auto.static_instance_id != "auto"
    assert auto.kafka_client_configs()[0]["group.instance.id"] == auto.static_instance_id
    off = ConsumerConfig.load({"POSTBOX_INSTANCE_ID": "none"}, group="g", topics="outbox.event.x").with_default_instance("app")
    assert off.static_instance_id is None and "group.instance.id" not in off.kafka_client_configs()[0]


def test_an_unusable_instance_id_is_refused_naming_its_source():
    with pytest.raises(ConfigError, match="POSTBOX_INSTANCE_ID"):
        ConsumerConfig.load({"POSTBOX_INSTANCE_ID": "a b"}, group="g", topics="outbox.event.x")
