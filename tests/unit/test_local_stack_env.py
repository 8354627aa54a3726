"""The local stack's variables outside a postbox checkout: none, not an error.

Found trying the README walkthrough from a fresh folder with the wheel installed: `EffectsHarness()`
(and every CLI command reading settings) raised "the local stack runs from a postbox checkout" although
POSTBOX_REDIS_URL and friends were set — an installed service has no checkout and needs none."""

from __future__ import annotations

import pytest

from postbox.errors import ConfigError
from postbox.stack import addresses


def _no_checkout() -> None:
    raise ConfigError("the local stack runs from a postbox checkout, and there is none here")


def test_no_checkout_means_no_local_stack_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(addresses, "default_state_dir", _no_checkout)
    assert addresses.local_stack_env({"POSTBOX_REDIS_URL": "redis://elsewhere:6379/0"}) == {}


def test_a_postbox_home_that_is_no_checkout_is_still_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(addresses, "default_state_dir", _no_checkout)
    with pytest.raises(ConfigError):
        addresses.local_stack_env({"POSTBOX_HOME": "/nowhere"})


def test_the_cli_of_a_multi_node_stack_knows_every_kafka_node(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`postbox lag` & co. in the checkout of `postbox up --kafka-nodes 3` must still find the cluster
    when node 1 is the one that died: their bootstrap lists every node, as `postbox env` does."""
    from postbox.stack.topology import Topology

    monkeypatch.setenv("POSTBOX_STATE_DIR", str(tmp_path))
    monkeypatch.delenv("POSTBOX_KAFKA_PORT", raising=False)
    assert "POSTBOX_KAFKA_BOOTSTRAP" not in addresses.local_stack_env({})  # the plain stack: the default serves
    Topology(3, 1).save(tmp_path / "run")
    assert addresses.local_stack_env({})["POSTBOX_KAFKA_BOOTSTRAP"] == "127.0.0.1:9092,127.0.0.1:9094,127.0.0.1:9096"
    assert addresses.local_stack_env({"POSTBOX_KAFKA_PORT": "19092"})["POSTBOX_KAFKA_BOOTSTRAP"].startswith("127.0.0.1:19092,127.0.0.1:19094")
