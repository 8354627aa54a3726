"""`postbox doctor` inspects the group registry; it never adds itself to it.

The registry (`<namespace>:groups`, postbox.effects.groups) lists the consumer groups whose marker
TTL doctor checks against how long Kafka can redeliver (#12.2). Doctor's "scripts loadable" check
loads the apply script through an EffectsEngine, and loading publishes the engine's group: with
load() every doctor run registered a group "postbox-doctor" that never consumes anything, and
doctor then reported "marker TTL postbox-doctor" as one of the user's groups (found by following
README's "Add postbox to your service" as a new user; fixed by b86895e's load(publish=False)).
Shown to fail: with doctor calling engine.load() again (the main before b86895e) the registry
held "postbox-doctor".
"""

from __future__ import annotations

import json

import pytest

from postbox.effects import groups as group_registry
from tests.support.cli import invoke
from tests.support.redis_servers import RedisServer

pytestmark = pytest.mark.integration


def test_doctor_registers_no_group_of_its_own(settings) -> None:
    server = RedisServer().start()  # its own Redis: the registry starts empty
    client = server.client()
    try:
        _code, out = invoke("doctor", "--redis-url", server.url, "--json")  # its verdict on the rest is not the point
        report = json.loads(out)
        statuses = {c["check"]: c["status"] for c in report["checks"]}
        assert statuses["scripts loadable"] == "ok", statuses  # the script was loaded ...
        assert group_registry.read(client) == {}  # ... and no group was published
        assert not [name for name in statuses if name.startswith("marker TTL ")], statuses
    finally:
        client.close()
        server.stop()
