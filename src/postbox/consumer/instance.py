"""Static group membership: a stable instance name per consumer process (``group.instance.id``).

Why: with dynamic membership a SIGKILLed consumer's partitions wait until the group coordinator
expels the dead member (``session.timeout.ms``, 45 s by default), and its restart joins as a
*new* member, so a crash-looping consumer stalls its partitions again and again. A static member
(KIP-345) that comes back under the same instance name gets its partitions back at once, without
a rebalance.

The trade-off, which is why the name must be stable *and* unique:

- a static member that dies and does not come back keeps its partitions until
  ``session.timeout.ms`` (the same wait as a dynamic member's crash). A static member's
  ``close()`` sends no LeaveGroup, so the runtime unsubscribes first on an orderly stop: a
  SIGTERM (scale-down, deploy) hands the partitions over at once, as a dynamic member does;
- two live processes with the same name fence each other: the older one is refused
  (``FENCED_INSTANCE_ID``), rejoins once, and stops when fenced again
  (:mod:`postbox.consumer.fencing`).

The default name (:func:`claim_default`) is ``<host>-<app>-<group>-<index>``: the index is the
lowest one whose lock file (in the temporary folder) no other process holds, so two processes on
one host never share a name, and a restarted process takes back the index its crashed predecessor
held (the kernel drops a dead process's lock). Hosts whose name is not unique (containers sharing
the host's network namespace and name but not its temporary folder) must set the name explicitly
(``--instance-id`` / ``POSTBOX_INSTANCE_ID``), or turn static membership off with ``none``.

``postbox consume`` claims the default name unless ``--instance-id`` says otherwise (``auto``: the
default name, ``none``: a dynamic member). After a broker or group-coordinator restart the broker
can answer a static member's commit with ``FENCED_INSTANCE_ID`` although no other process holds its
name, which librdkafka reports as fatal: the runtime answers the first such fence by rejoining
with a new client under the same name (:mod:`postbox.consumer.fencing`).
"""

from __future__ import annotations

import fcntl
import os
import re
import socket
import tempfile
from pathlib import Path
from typing import IO

from postbox.errors import ConfigError

#: The value of ``--instance-id`` / ``POSTBOX_INSTANCE_ID`` that turns static membership off.
DYNAMIC = "none"
#: Claim the per-host default name (:func:`claim_default`); also what an unset instance id does.
AUTO = "auto"
#: Kafka's limit for a group.instance.id is 249 characters of ``[A-Za-z0-9._-]``.
MAX_LENGTH = 249
#: How many processes of one group on one host the default naming supports.
MAX_INDEX = 1024
_UNSAFE = re.compile(r"[^A-Za-z0-9._\-]+")

#: The lock files this process holds (kept open for the process's lifetime: closing one would
#: let another process take the same name while this one still uses it).
_held: list[IO[str]] = []


def sanitize(text: str) -> str:
    """``text`` with every character Kafka refuses in an instance id replaced by ``-``."""
    return _UNSAFE.sub("-", text).strip("-") or "host"


def is_valid(instance_id: str) -> bool:
    return bool(instance_id) and len(instance_id) <= MAX_LENGTH and not _UNSAFE.search(instance_id)


def lock_dir() -> Path:
    """Where the default names' lock files live (one folder per user of the host)."""
    return Path(tempfile.gettempdir()) / f"postbox-instances-{os.getuid()}"


def claim_default(group: str, app_name: str | None = None, *, host: str | None = None, folder: Path | None = None) -> str:
    """The default instance name of this process: ``<host>-[<app>-]<group>-<index>``, claiming the
    lowest free ``index`` on this host (held until the process exits). See the module docs."""
    base = "-".join(sanitize(p) for p in (host or socket.gethostname(), app_name if app_name and app_name != group else None, group) if p)
    folder = folder or lock_dir()
    folder.mkdir(parents=True, exist_ok=True)
    for index in range(MAX_INDEX):
        name = f"{base[: MAX_LENGTH - 6]}-{index}"
        handle = (folder / f"{name}.lock").open("a")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            continue
        _held.append(handle)
        return name
    raise RuntimeError(f"{MAX_INDEX} processes of group {group} already hold an instance name on this host ({folder})")


def release_all() -> None:
    """Give back every name this process claimed (tests; a process exiting releases them anyway)."""
    while _held:
        _held.pop().close()


def instance_fenced(instance_id: str | None, detail: str) -> ConfigError:
    """The configuration error of a member fenced by another process using its instance id."""
    return ConfigError(
        f"another consumer process joined the group with instance id {instance_id!r} ({detail})",
        fix="give every process its own --instance-id / POSTBOX_INSTANCE_ID (or leave it unset: the default "
        "is unique per host), or turn static membership off with --instance-id none",
    )
