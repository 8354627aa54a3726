"""What each worker of ``postbox consume --workers N`` is given: how many there are, their
static-membership names and their metrics ports. Pure functions, apart from the name claim passed in.

- ``--workers auto`` is the number of cores this process may run on (its CPU affinity, which a
  container's cpuset narrows), not the host's count.
- Names: two live members with one ``group.instance.id`` fence each other, so every worker gets its
  own. Unset or ``auto``: the supervisor claims N per-host default names
  (:func:`postbox.consumer.instance.claim_default`, held for its lifetime), so worker ``i`` keeps
  the same name across its restarts and gets its partitions back without a rebalance. An explicit
  ``--instance-id NAME``: ``NAME-0`` .. ``NAME-<N-1>``. ``none``: dynamic members.
- Metrics: one endpoint per worker on consecutive ports (worker ``i`` on ``--metrics-port + i``),
  each with that worker's own ``/healthz`` and ``/readyz``: a liveness probe of one worker says
  nothing of another's loop, and Prometheus's per-process collectors stay true.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from postbox.consumer import instance

#: ``--workers auto``: one worker per core this process may run on.
AUTO = "auto"
#: The most workers one supervisor runs.
MAX_WORKERS = 256
#: The highest TCP port.
MAX_PORT = 65535


def available_cores() -> int:
    """Cores this process may run on (its affinity mask; the host's count where there is none)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def parse_workers(raw: str, cores: Callable[[], int] = available_cores) -> int:
    """The worker count ``raw`` asks for; ValueError saying what is expected."""
    text = raw.strip().lower()
    if text == AUTO:
        return min(cores(), MAX_WORKERS)
    if not text.isdigit() or not 1 <= int(text) <= MAX_WORKERS:
        raise ValueError(f"a whole number of workers from 1 to {MAX_WORKERS}, or {AUTO!r} (one per core)")
    return int(text)


def instance_ids(instance_id: str | None, count: int, claim: Callable[[], str]) -> list[str]:
    """Each worker's ``--instance-id`` (module docs); ``claim()`` claims one per-host default name.
    ValueError when an explicit name with its suffix is not a valid instance id."""
    if instance_id in (None, instance.AUTO):
        return [claim() for _ in range(count)]
    if instance_id == instance.DYNAMIC:
        return [instance.DYNAMIC] * count
    names = [f"{instance_id}-{i}" for i in range(count)]
    if not instance.is_valid(names[-1]):
        raise ValueError(f"instance id {instance_id!r} with a worker suffix ({names[-1]!r}) is longer than {instance.MAX_LENGTH} characters")
    return names


def metrics_ports(port: int, count: int) -> list[int]:
    """Each worker's ``--metrics-port``: ``port + i``, or 0 (no endpoint) for all when ``port`` is 0."""
    if port == 0:
        return [0] * count
    if port + count - 1 > MAX_PORT:
        raise ValueError(f"{count} workers need ports {port} to {port + count - 1}, past {MAX_PORT}")
    return [port + i for i in range(count)]
