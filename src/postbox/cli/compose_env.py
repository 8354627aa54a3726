"""`postbox env --compose`: the settings host-side clients need for the docker compose stack.

The compose file publishes the local stack's ports on loopback, but its Redis puts a password on
every user (the consumers log in as the ACL user ``postbox_consumer``) and its database roles have
the passwords of ``infra/.env``. This builds the URLs from that file, passwords percent-encoded,
so ``eval "$(postbox env --compose)"`` points the CLI and consumers at the containers.

With ``--replicas`` (``infra/docker-compose.replicas.yml``: three Kafka nodes, two Connect
workers, a Redis primary with a replica and three Sentinels) the bootstrap lists every node, so a
client that starts while one is down still finds the cluster, and Redis is reached through the
Sentinels, so a consumer follows a promotion without a restart.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import quote

from postbox.effects.acl import CONSUMER_USER
from postbox.effects.durability import APPENDFSYNC_ENV
from postbox.errors import ConfigError
from postbox.settings import LOCAL_CONNECT_PORT, LOCAL_KAFKA_PORT, LOCAL_PG_PORT, LOCAL_REDIS_PORT
from postbox.stack.ports import NODE_PORT_STEP
from postbox.stack.addresses import SENTINEL_SERVICE
from postbox.stack.secrets import read_secrets

DEFAULT_ENV_FILE = Path("infra") / ".env"
#: The replicated compose topology: Kafka nodes, the Sentinels' published ports, the service they watch.
REPLICA_KAFKA_NODES = 3
REPLICA_SENTINEL_PORTS = (26379, 26380, 26381)
_NEEDED = ("POSTBOX_APP_PASSWORD", "POSTBOX_REDIS_CONSUMER_PASSWORD", "POSTBOX_PG_SUPERUSER_PASSWORD", "POSTBOX_MAINT_PASSWORD")


def compose_value(raw: str) -> str:
    r"""A value of a compose ``.env`` file as docker compose hands it to the containers: inside
    double quotes with ``\"`` and ``\\`` unescaped, inside single quotes as it is, unquoted
    without an inline `` #`` comment (a quoted password kept its quotes in the URLs before)."""
    if len(raw) >= 2 and raw[0] == raw[-1] == "'":
        return raw[1:-1]
    if len(raw) >= 2 and raw[0] == raw[-1] == '"':
        return re.sub(r'\\(["\\])', r"\1", raw[1:-1])
    return raw.split(" #", 1)[0].rstrip()


def compose_env(env_file: Path, replicas: bool = False) -> dict[str, str]:
    """The ``POSTBOX_*`` variables for host-side clients of the compose stack described by ``env_file``
    (``replicas``: of the replicated topology, the base file with docker-compose.replicas.yml)."""
    if not env_file.is_file():
        raise ConfigError(f"no compose env file at {env_file}", fix="cp infra/compose.env.example infra/.env and set its passwords, or pass --env-file")
    values = {key: compose_value(value) for key, value in read_secrets(env_file).items()}
    missing = [name for name in _NEEDED if not values.get(name)]
    if missing:
        raise ConfigError(f"{env_file} does not set {', '.join(missing)}", fix="copy them from infra/compose.env.example and set real passwords")

    def pg(user: str, password_var: str) -> str:
        return f"postgresql://{user}:{quote(values[password_var], safe='')}@127.0.0.1:{LOCAL_PG_PORT}/postbox"

    consumer = f"{CONSUMER_USER}:{quote(values['POSTBOX_REDIS_CONSUMER_PASSWORD'], safe='')}"
    if replicas:
        nodes = range(REPLICA_KAFKA_NODES)
        bootstrap = ",".join(f"127.0.0.1:{LOCAL_KAFKA_PORT + NODE_PORT_STEP * n}" for n in nodes)
        # The consumer's own login is for the data nodes; the Sentinels ask for none (loopback only).
        sentinels = ",".join(f"127.0.0.1:{port}" for port in REPLICA_SENTINEL_PORTS)
        redis_url = f"redis+sentinel://{consumer}@{sentinels}/{SENTINEL_SERVICE}"
    else:
        bootstrap = f"127.0.0.1:{LOCAL_KAFKA_PORT}"
        redis_url = f"redis://{consumer}@127.0.0.1:{LOCAL_REDIS_PORT}/0"
    return {
        "POSTBOX_DATABASE_URL": pg("postbox_app", "POSTBOX_APP_PASSWORD"),
        "POSTBOX_KAFKA_BOOTSTRAP": bootstrap,
        "POSTBOX_REDIS_URL": redis_url,
        # Worker 1 (with --replicas, worker 2 answers on the next port); any worker forwards to the leader.
        "POSTBOX_CONNECT_URL": f"http://127.0.0.1:{LOCAL_CONNECT_PORT}",
        # The superuser, for `postbox db init` and the application's own DDL (the app role may only insert).
        "POSTBOX_ADMIN_DATABASE_URL": pg("postgres", "POSTBOX_PG_SUPERUSER_PASSWORD"),
        "POSTBOX_MAINT_DATABASE_URL": pg("postbox_maint", "POSTBOX_MAINT_PASSWORD"),
        # The consumer user may not read CONFIG; the compose Redis runs with appendfsync always.
        APPENDFSYNC_ENV: "always",
    }
