"""Where `postbox consume`'s log lines go when the app configured logging itself (and when not):
the app's root handlers are kept and see the event's fields; postbox's stderr handler is added
per ``log_stderr``; configuring twice adds no second stderr handler."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

from postbox.consumer import logs
from postbox.consumer.config import ConsumerConfig
from postbox.errors import ConfigError
from postbox.events import Event


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def root() -> Iterator[logging.Logger]:
    """The root logger without handlers, given back as it was after the test. pytest's own capture
    handlers join the root logger after fixtures are set up, so the fixture hands over a logger that
    empties itself: each test calls ``root.empty()`` first."""
    logger = logging.getLogger()
    saved, level = list(logger.handlers), logger.level
    logger.empty = lambda: [logger.removeHandler(h) for h in list(logger.handlers)]  # type: ignore[attr-defined]
    yield logger
    del logger.empty  # type: ignore[attr-defined]
    for h in list(logger.handlers):
        logger.removeHandler(h)
    for h in saved:
        logger.addHandler(h)
    logger.setLevel(level)


def _stderr_handlers(logger: logging.Logger) -> list[logging.Handler]:
    return [h for h in logger.handlers if isinstance(h, logging.StreamHandler) and not isinstance(h, _Collect)]


def _event() -> Event:
    return Event(id="e-1", aggregate_type="order", aggregate_id="42", event_type="Paid", payload={},
                 topic="outbox.event.order", partition=3, offset=17, headers={})


def test_an_apps_handler_is_kept_and_gets_the_events_fields(root):
    root.empty()
    app = _Collect()
    root.addHandler(app)
    logs.configure("json", "INFO")
    assert root.handlers == [app]  # auto: the app has a handler, postbox adds none
    with logs.log_context(group="billing"):
        token = logs.bind_event(_event())
        logging.getLogger("shop").info("paid")
        logs.unbind_event(token)
    (record,) = app.records
    assert (record.group, record.event_id, record.offset, record.topic) == ("billing", "e-1", 17, "outbox.event.order")


def test_a_field_never_overwrites_an_attribute_the_record_has(root):
    root.empty()
    app = _Collect()
    root.addHandler(app)
    logs.configure("text", "INFO")
    with logs.log_context(group="billing"):
        logging.getLogger("shop").info("paid", extra={"group": "mine"})
    assert app.records[0].group == "mine"


def test_without_app_handlers_postbox_writes_stderr_once(root, monkeypatch):
    root.empty()
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    logs.configure("json", "INFO")
    logs.configure("json", "INFO")  # a second configure replaces postbox's handler
    assert len(_stderr_handlers(root)) == 1
    logging.getLogger("shop").info("paid")
    assert err.getvalue().count('"msg": "paid"') == 1


@pytest.mark.parametrize(("mode", "stderr_handlers"), [("auto", 0), ("always", 1), ("never", 0)])
def test_log_stderr_beside_an_apps_handler(root, mode, stderr_handlers):
    root.empty()
    app = _Collect()
    root.addHandler(app)
    logs.configure("text", "WARNING", mode)
    assert app in root.handlers and len(_stderr_handlers(root)) == stderr_handlers
    assert root.level == logging.WARNING


def test_never_without_app_handlers_adds_nothing(root):
    root.empty()
    logs.configure("text", "INFO", "never")
    assert root.handlers == []


def test_log_stderr_is_checked_with_its_variable():
    with pytest.raises(ConfigError, match="POSTBOX_LOG_STDERR='sometimes'") as info:
        ConsumerConfig.load({"POSTBOX_LOG_STDERR": "sometimes"}, group="g", topics="t")
    assert "auto, always, never" in str(info.value)
    assert ConsumerConfig.load({"POSTBOX_LOG_STDERR": "Always"}, group="g", topics="t").log_stderr == "always"
