"""The local stack's ports: the usual ones by default, each overridable by an environment variable."""

from __future__ import annotations

import os
from dataclasses import dataclass

from postbox.errors import ConfigError
from postbox import settings as _defaults


def _port(var: str, default: int) -> int:
    raw = os.environ.get(var)
    if not raw:
        return default
    if not raw.isdigit() or not 0 < int(raw) < 65536:
        raise ConfigError(f"{var}={raw!r} is not a TCP port (1-65535)")
    return int(raw)


@dataclass(frozen=True)
class StackPorts:
    postgres: int
    redis: int
    kafka: int
    controller: int
    connect: int

    @classmethod
    def from_env(cls) -> "StackPorts":
        return cls(
            postgres=_port("POSTBOX_PG_PORT", _defaults.LOCAL_PG_PORT),
            redis=_port("POSTBOX_REDIS_PORT", _defaults.LOCAL_REDIS_PORT),
            kafka=_port("POSTBOX_KAFKA_PORT", _defaults.LOCAL_KAFKA_PORT),
            controller=_port("POSTBOX_KAFKA_CONTROLLER_PORT", _defaults.LOCAL_KAFKA_PORT + 1),
            connect=_port("POSTBOX_CONNECT_PORT", _defaults.LOCAL_CONNECT_PORT),
        )
