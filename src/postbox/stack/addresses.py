"""The local stack's settings as environment variables, read from its state folder for the CLI.

Why here: the library never looks at `.postbox/`. The CLI (and the demo, benches and tests) read
what `postbox up` generated — role passwords, the Redis ACL user, the fsync policy the stack gave
its Redis — through this one function and hand it to :meth:`postbox.settings.Settings.load` as
``local=...``; a variable the environment sets wins over it. The result has the same names as
`postbox env` prints, so "no variables set" and "`eval "$(postbox env)"`" mean the same thing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from postbox.database_url import database_url
from postbox.errors import ConfigError
from postbox.settings import LOCAL_KAFKA_PORT, LOCAL_PG_PORT, LOCAL_REDIS_PORT
from postbox.stack.layout import default_state_dir
from postbox.stack.secrets import read_secrets

#: The file `postbox up` writes once its Redis runs with the stack's aclfile: ``port=<port>``, and
#: for a replicated Redis a second line ``sentinels=<port>,<port>,…``.
REDIS_ACL_MARKER = "run/redis-acl.active"
#: The name the local Sentinels know the primary by: the service of the consumers' ``redis+sentinel://`` URL.
SENTINEL_SERVICE = "postbox"


def local_stack_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``POSTBOX_DATABASE_URL``, ``POSTBOX_MAINT_DATABASE_URL``, ``POSTBOX_REDIS_URL``, (several Kafka nodes) ``POSTBOX_KAFKA_BOOTSTRAP``,
    ``POSTBOX_REDIS_APPENDFSYNC`` and (with the Redis) ``POSTBOX_LUA_DIR`` of the local stack, each only when its state folder has what it
    takes (passwords generated, Redis started with the ACL on this port); {} without a stack.

    Ports follow ``POSTBOX_PG_PORT`` / ``POSTBOX_REDIS_PORT`` in ``environ`` (default os.environ),
    as `postbox up` does."""
    env = os.environ if environ is None else environ
    try:
        state = default_state_dir()
    except ConfigError:
        if env.get("POSTBOX_HOME"):
            raise  # a checkout named on purpose that is not one: say so
        return {}  # no checkout here or above (an installed service): no local stack to read
    try:
        secrets = read_secrets(state / "secrets.env")
        marker = state / REDIS_ACL_MARKER
        marker_lines = marker.read_text().split() if marker.is_file() else []
    except OSError:  # an unreadable state folder is no local stack
        return {}
    found: dict[str, str] = {}
    pg_port = env.get("POSTBOX_PG_PORT") or str(LOCAL_PG_PORT)
    for var, user, secret in (
        ("POSTBOX_DATABASE_URL", "postbox_app", "POSTBOX_APP_PASSWORD"),
        ("POSTBOX_MAINT_DATABASE_URL", "postbox_maint", "POSTBOX_MAINT_PASSWORD"),
    ):
        if secrets.get(secret):
            found[var] = database_url(user=user, password=secrets[secret], port=pg_port)
    redis_port = env.get("POSTBOX_REDIS_PORT") or str(LOCAL_REDIS_PORT)
    consumer_password = secrets.get("POSTBOX_REDIS_CONSUMER_PASSWORD")
    if marker_lines[:1] == [f"port={redis_port}"] and consumer_password:
        found["POSTBOX_REDIS_URL"] = _consumer_redis_url(marker_lines, redis_port, consumer_password)
        # The consumer user may not read CONFIG; the stack started this Redis with this policy.
        found["POSTBOX_REDIS_APPENDFSYNC"] = env.get("POSTBOX_REDIS_APPENDFSYNC") or "always"
        found.update(_reference_functions())
    found.update(_kafka_nodes(state, env))
    return found


def _kafka_nodes(state: "os.PathLike[str] | str", env: Mapping[str, str]) -> dict[str, str]:
    """``POSTBOX_KAFKA_BOOTSTRAP`` listing every node of a multi-node stack (``run/topology.json``),
    so the CLI still finds the cluster when node 1 is down; {} for the plain stack (the default serves)."""
    from pathlib import Path

    from postbox.stack.ports import NODE_PORT_STEP
    from postbox.stack.topology import Topology

    try:
        topology = Topology.load(Path(state) / "run")
    except ConfigError:
        return {}  # `postbox up` says what is wrong with the record; the CLI keeps its default
    if topology.kafka_nodes == 1:
        return {}
    base = int(env.get("POSTBOX_KAFKA_PORT") or LOCAL_KAFKA_PORT)
    return {"POSTBOX_KAFKA_BOOTSTRAP": ",".join(f"127.0.0.1:{base + NODE_PORT_STEP * n}" for n in range(topology.kafka_nodes))}


def _consumer_redis_url(marker_lines: list[str], redis_port: str, password: str) -> str:
    """The node's URL, or the Sentinels' service when the marker lists Sentinels (a replicated Redis)."""
    from postbox.effects.acl import CONSUMER_USER

    sentinels = [line.removeprefix("sentinels=") for line in marker_lines if line.startswith("sentinels=")]
    if not sentinels:
        return f"redis://{CONSUMER_USER}:{password}@127.0.0.1:{redis_port}/0"
    hosts = ",".join(f"127.0.0.1:{port}" for port in sentinels[0].split(","))
    return f"redis+sentinel://{CONSUMER_USER}:{password}@{hosts}/{SENTINEL_SERVICE}/0"


def _reference_functions() -> dict[str, str]:
    """``POSTBOX_LUA_DIR`` of the checkout's reference functions (``consumers/lua``), for consumers
    run against this stack's Redis: the library itself loads no Lua file unless a setting names
    its folder (:func:`postbox.resources.lua_functions_dir`)."""
    from postbox.resources import DEFAULT_LUA_DIR
    from postbox.stack.checkout import checkout_root

    try:
        folder = checkout_root() / DEFAULT_LUA_DIR
    except ConfigError:
        return {}
    return {"POSTBOX_LUA_DIR": str(folder)} if folder.is_dir() else {}


__all__ = ["REDIS_ACL_MARKER", "SENTINEL_SERVICE", "local_stack_env"]
