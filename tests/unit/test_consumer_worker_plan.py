"""`postbox consume --workers N`: how many workers, and each one's own instance id and metrics port."""

from __future__ import annotations

import itertools

import pytest

from postbox.consumer import instance
from postbox.consumer.worker_plan import MAX_WORKERS, instance_ids, metrics_ports, parse_workers


def test_workers_is_a_count_or_auto_for_the_cores_this_process_may_use():
    assert parse_workers("3") == 3
    assert parse_workers(" AUTO ", cores=lambda: 6) == 6
    assert parse_workers("auto", cores=lambda: 10_000) == MAX_WORKERS


@pytest.mark.parametrize("raw", ["0", "-1", "two", "1.5", "", str(MAX_WORKERS + 1)])
def test_a_worker_count_that_is_not_one_says_what_is_expected(raw):
    with pytest.raises(ValueError, match="whole number of workers from 1"):
        parse_workers(raw)


def test_default_names_are_claimed_once_per_worker_so_every_worker_has_its_own():
    counter = itertools.count()
    assert instance_ids(None, 3, lambda: f"host-g-{next(counter)}") == ["host-g-0", "host-g-1", "host-g-2"]
    assert instance_ids(instance.AUTO, 2, lambda: f"n{next(counter)}") == ["n3", "n4"]


def test_an_explicit_name_gets_a_suffix_per_worker_and_none_stays_dynamic():
    assert instance_ids("billing-pod-7", 2, lambda: pytest.fail("nothing to claim")) == ["billing-pod-7-0", "billing-pod-7-1"]
    assert instance_ids(instance.DYNAMIC, 2, lambda: pytest.fail("nothing to claim")) == [instance.DYNAMIC] * 2


def test_an_explicit_name_too_long_for_its_suffix_is_refused_naming_it():
    name = "x" * instance.MAX_LENGTH
    with pytest.raises(ValueError, match="longer than 249"):
        instance_ids(name, 2, lambda: "")


def test_metrics_ports_are_consecutive_per_worker_or_off_for_all():
    assert metrics_ports(9464, 3) == [9464, 9465, 9466]
    assert metrics_ports(0, 3) == [0, 0, 0]
    with pytest.raises(ValueError, match="65535"):
        metrics_ports(65535, 2)
