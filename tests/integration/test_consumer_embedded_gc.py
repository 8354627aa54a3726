"""Review of #14.2's GC tuning: a ConsumerRuntime embedded in an application's process (a thread of a
web service, `replay --until --execute`, a test) sets the young-generation GC threshold to 20,000
and gc.freeze()s everything alive at start-up, for the whole process and for ever: nothing undoes
it when run() returns. The module's docs say "while a consumer runs"; the process keeps it after."""

from __future__ import annotations

import gc
import sys

import pytest

from postbox.consumer import App, ConsumerConfig
from postbox.consumer.switch_interval import SWITCH_INTERVAL_S
from tests.apps.counting import record
from tests.support.consumers import ThreadedRuntime, create_topic

pytestmark = pytest.mark.integration


def test_a_stopped_runtime_leaves_the_host_process_gc_as_it_found_it(settings, unique):
    topic = f"outbox.event.gc{unique}"
    create_topic(settings.kafka_bootstrap, topic, 1)
    app = App()
    app.catch_all(record)
    before = gc.get_threshold()
    frozen_before = gc.get_freeze_count()
    runtime = ThreadedRuntime(app, ConsumerConfig.load(group=f"test-gc-{unique}", topics=topic)).start()
    assert runtime.stop() == 0
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == frozen_before


def test_a_running_runtime_shortens_the_switch_interval_and_a_stopped_one_restores_it(settings, unique):
    """#14.2: while a runtime runs, the apply worker gets the GIL back within 0.5 ms of Redis's
    reply (not the default 5 ms); once it stops, the host's interval is back."""
    topic = f"outbox.event.swi{unique}"
    create_topic(settings.kafka_bootstrap, topic, 1)
    app = App()
    app.catch_all(record)
    before = sys.getswitchinterval()
    assert before > SWITCH_INTERVAL_S  # Python's default, 5 ms
    runtime = ThreadedRuntime(app, ConsumerConfig.load(group=f"test-swi-{unique}", topics=topic)).start()
    try:
        assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL_S, rel=0.05)
    finally:
        assert runtime.stop() == 0
    assert sys.getswitchinterval() == before
