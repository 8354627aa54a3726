"""The Kafka client options every command that talks to Kafka takes: ``--kafka-config`` and ``-X``.

One decorator adds them to a command (so the flags, their help and their meaning are written
once), and :func:`command_settings` builds the command's :class:`~postbox.settings.Settings` with
them: a command body never sees the raw flags, only the settings that carry the properties.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import os
from typing import Any, Callable, Optional, TypeVar

import typer

from postbox.kafka_config import ENV_VAR, SET_FLAG
from postbox.settings import Settings

F = TypeVar("F", bound=Callable[..., Any])

#: The running command's ``(--kafka-config, -X values)``, set by the decorator for its duration.
_CURRENT: contextvars.ContextVar[tuple[Optional[str], tuple[str, ...]]] = contextvars.ContextVar(
    "postbox_kafka_client_options", default=(None, ())
)

_CONFIG_PARAM = inspect.Parameter(
    "kafka_config",
    inspect.Parameter.KEYWORD_ONLY,
    default=typer.Option(
        None, "--kafka-config", metavar="FILE",
        help=f"librdkafka properties file (java-properties syntax, as kcat -F; env {ENV_VAR}).",
    ),
    annotation=Optional[str],
)  # fmt: skip
_SET_PARAM = inspect.Parameter(
    "kafka_set",
    inspect.Parameter.KEYWORD_ONLY,
    default=typer.Option(
        None, SET_FLAG, "--kafka-property", metavar="KEY=VALUE",
        help="One librdkafka property, over the file's (repeatable), e.g. -X security.protocol=SASL_SSL.",
    ),
    annotation=Optional[list[str]],
)  # fmt: skip


def kafka_client_options(command: F) -> F:
    """Give ``command`` the ``--kafka-config`` and ``-X`` options; :func:`command_settings` reads them."""
    signature = inspect.signature(command, eval_str=True)

    @functools.wraps(command)
    def wrapper(*args: Any, kafka_config: Optional[str] = None, kafka_set: Optional[list[str]] = None, **kwargs: Any) -> Any:
        token = _CURRENT.set((kafka_config, tuple(kafka_set or ())))
        try:
            return command(*args, **kwargs)
        finally:
            _CURRENT.reset(token)

    params = [p for p in signature.parameters.values()] + [_CONFIG_PARAM, _SET_PARAM]
    wrapper.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {**command.__annotations__, "kafka_config": Optional[str], "kafka_set": Optional[list[str]]}
    return wrapper  # type: ignore[return-value]


def command_settings(**overrides: Optional[str]) -> Settings:
    """The running command's settings: its endpoint flags (non-empty ``overrides``) and its
    ``--kafka-config`` / ``-X`` options over the environment, over the local stack's addresses."""
    kafka_config, kafka_set = current_kafka_options()
    flags: dict[str, str | None] = {k: v for k, v in overrides.items() if v}
    return Settings.load(None, kafka_config=kafka_config, kafka_set=kafka_set, local=local_stack_env(), **flags)


def local_stack_env() -> dict[str, str]:
    """The local stack's variables (`postbox env` without the ones the environment sets), read from
    its state folder: the CLI hands them to the library, which never reads that folder itself."""
    from postbox.stack.addresses import local_stack_env as read

    return read()


def export_local_stack_env() -> None:
    """Put the local stack's variables into this process's environment where it sets none, as
    ``eval "$(postbox env)"`` would: for what a command runs that reads the environment itself
    (a handler's own ``Settings.load()``, the engine's ``POSTBOX_REDIS_APPENDFSYNC``)."""
    for key, value in local_stack_env().items():
        if not os.environ.get(key):  # an empty variable counts as unset, as in Settings.load
            os.environ[key] = value


def current_kafka_options() -> tuple[Optional[str], tuple[str, ...]]:
    """``(--kafka-config, -X values)`` of the running command (none outside a command)."""
    return _CURRENT.get()
