"""#12.10: the one table that classifies a handler's exceptions (postbox.consumer.handler_errors)."""

from __future__ import annotations

import socket

import httpx
import pytest
import redis

from postbox.consumer.handler_errors import Retry, Verdict, classify
from postbox.errors import DecodeError, InvalidEffectError, TransientEffectError


def _status_error(status: int) -> httpx.HTTPStatusError:
    try:
        httpx.Response(status, request=httpx.Request("GET", "http://svc/x")).raise_for_status()
    except httpx.HTTPStatusError as exc:
        return exc
    raise AssertionError("no error raised")


class Quota(Exception):
    pass


@pytest.mark.parametrize("exc", [
    ConnectionError("refused"), ConnectionResetError(), TimeoutError(), OSError(101, "Network is unreachable"),
    socket.gaierror(-3, "Temporary failure in name resolution"), redis.ConnectionError("down"), redis.TimeoutError(),
    httpx.ConnectError("refused"), httpx.ReadTimeout("slow"), _status_error(503), _status_error(429), _status_error(502),
    Retry("later"), TransientEffectError("busy", reason="BUSY"),
])
def test_dependency_outages_are_transient(exc):
    assert classify(exc) is Verdict.TRANSIENT


@pytest.mark.parametrize("exc", [ValueError("bad"), KeyError("x"), _status_error(404), _status_error(400), FileNotFoundError("x"), PermissionError()])
def test_other_errors_are_retried_in_place_then_dead_lettered(exc):
    assert classify(exc) is Verdict.RETRY_IN_PLACE


def test_descriptions_that_can_never_apply_are_permanent_at_once():
    assert classify(InvalidEffectError("too big")) is Verdict.PERMANENT
    assert classify(DecodeError("bad bytes")) is Verdict.PERMANENT


def test_a_handler_declares_its_own_transient_errors():
    assert classify(Quota("wait")) is Verdict.RETRY_IN_PLACE
    assert classify(Quota("wait"), (Quota,)) is Verdict.TRANSIENT
