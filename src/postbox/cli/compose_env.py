"""`postbox env --compose`: the settings host-side clients need for the docker compose stack.

The compose file publishes the local stack's ports on loopback, but its Redis puts a password on
every user (the consumers log in as the ACL user ``postbox_consumer``) and its database roles have
the passwords of ``infra/.env``. This builds the URLs from that file, passwords percent-encoded,
so ``eval "$(postbox env --compose)"`` points the CLI and consumers at the containers.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

from postbox.effects.acl import CONSUMER_USER
from postbox.effects.durability import APPENDFSYNC_ENV
from postbox.errors import ConfigError
from postbox.settings import LOCAL_CONNECT_PORT, LOCAL_KAFKA_PORT, LOCAL_PG_PORT, LOCAL_REDIS_PORT
from postbox.stack.secrets import read_secrets

DEFAULT_ENV_FILE = Path("infra") / ".env"
_NEEDED = ("POSTBOX_APP_PASSWORD", "POSTBOX_REDIS_CONSUMER_PASSWORD", "POSTBOX_PG_SUPERUSER_PASSWORD", "POSTBOX_MAINT_PASSWORD")


def compose_env(env_file: Path) -> dict[str, str]:
    """The ``POSTBOX_*`` variables for host-side clients of the compose stack described by ``env_file``."""
    if not env_file.is_file():
        raise ConfigError(f"no compose env file at {env_file}", fix="cp infra/compose.env.example infra/.env and set its passwords, or pass --env-file")
    values = read_secrets(env_file)
    missing = [name for name in _NEEDED if not values.get(name)]
    if missing:
        raise ConfigError(f"{env_file} does not set {', '.join(missing)}", fix="copy them from infra/compose.env.example and set real passwords")

    def pg(user: str, password_var: str) -> str:
        return f"postgresql://{user}:{quote(values[password_var], safe='')}@127.0.0.1:{LOCAL_PG_PORT}/postbox"

    return {
        "POSTBOX_DATABASE_URL": pg("postbox_app", "POSTBOX_APP_PASSWORD"),
        "POSTBOX_KAFKA_BOOTSTRAP": f"127.0.0.1:{LOCAL_KAFKA_PORT}",
        "POSTBOX_REDIS_URL": f"redis://{CONSUMER_USER}:{quote(values['POSTBOX_REDIS_CONSUMER_PASSWORD'], safe='')}@127.0.0.1:{LOCAL_REDIS_PORT}/0",
        "POSTBOX_CONNECT_URL": f"http://127.0.0.1:{LOCAL_CONNECT_PORT}",
        # The superuser, for `postbox db init` and the application's own DDL (the app role may only insert).
        "POSTBOX_ADMIN_DATABASE_URL": pg("postgres", "POSTBOX_PG_SUPERUSER_PASSWORD"),
        "POSTBOX_MAINT_DATABASE_URL": pg("postbox_maint", "POSTBOX_MAINT_PASSWORD"),
        # The consumer user may not read CONFIG; the compose Redis runs with appendfsync always.
        APPENDFSYNC_ENV: "always",
    }
