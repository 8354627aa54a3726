"""The Redis ACL of a consumer: exactly the commands the runtime and the incident CLI need, on the
key patterns the pipeline writes.

- Scripts: ``EVALSHA``/``EVAL`` and ``SCRIPT LOAD``/``SCRIPT EXISTS`` (the apply script and user
  Lua functions). Redis checks the ACL of every command a script issues, and its keys, so the
  effect commands of ``src/postbox/lua/apply_effects.lua`` and ``consumers/lua/*.lua`` are
  listed too (:data:`SCRIPT_COMMANDS`; a unit test greps the Lua files against it).
- The failure stream written by the runtime (``XADD``, ``PEXPIRE``); the failure verdicts the
  runtime leaves in markers (``GET SET DEL``, :mod:`postbox.effects.verdicts`); the group registry
  (``HSET``).
- Connection and checks: ``PING``, ``INFO`` (version, ``INFO persistence``, ``INFO memory``'s
  eviction policy, ``INFO replication``'s connected replicas), ``HELLO``,
  ``CLIENT SETNAME|GETNAME|ID``; ``WAIT`` (an apply confirmed on the replicas).
- The incident CLI's reads: ``GET EXISTS PTTL TYPE SCAN DBSIZE XRANGE XREVRANGE XLEN``, and reads
  of the consumer's own state (``HLEN LRANGE SCARD ...``, :data:`STATE_COMMANDS`).
- Keys: ``postbox:*`` (markers, failure streams) and ``{*`` (hash-tagged aggregate keys,
  ``{<aggregate_type>:<id>}:...``); configurable (``POSTBOX_REDIS_KEY_PATTERNS``). No pub/sub
  channels.

**A user per consumer group** (:func:`group_rules`, printed by ``postbox acl --group``): the same
commands on the keys of that group's layout alone (:meth:`postbox.effects.keys.KeyLayout.acl_patterns`:
its markers — failure verdicts included —, failure streams, and the shared group registry) plus the handler's
effect key patterns, which may not reach ``<namespace>:`` keys. One service can then no longer
delete or forge another group's markers.

Everything else is refused: ``FLUSHALL``/``FLUSHDB``, ``KEYS``, ``CONFIG`` (all of it: Redis 7.0
cannot restrict a subcommand's argument, and ``CONFIG GET`` would read every setting), ``DEBUG``,
``SHUTDOWN``, ``ACL``, ``MODULE``, ``FUNCTION``, ``MIGRATE``, ... Without ``CONFIG GET`` the
consumer cannot read ``appendfsync``: :func:`postbox.effects.durability.check_server` then reads
``INFO persistence`` (AOF on?) and takes the fsync policy from ``POSTBOX_REDIS_APPENDFSYNC`` (the
same variable that sets the local stack's policy).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Sequence

from postbox.effects.groups import DEFAULT_NAMESPACE
from postbox.errors import ConfigError
from postbox.effects.keys import KeyLayout

CONSUMER_USER = "postbox_consumer"
KEY_PATTERNS_ENV = "POSTBOX_REDIS_KEY_PATTERNS"
DEFAULT_KEY_PATTERNS = ("postbox:*", "{*")

#: Commands the apply script and the reference Lua functions issue (checked against the .lua files).
SCRIPT_COMMANDS = (
    "del", "dump", "exists", "get", "hdel", "hget", "hgetall", "hincrby", "hmget", "hset", "incrby",
    "lpop", "lpush", "persist", "pexpire", "pexpireat", "pexpiretime", "restore", "rpop", "rpush",
    "sadd", "set", "smismember", "srem", "xadd", "xdel", "xinfo|stream", "xsetid", "xtrim", "zadd",
    "zincrby", "zmscore", "zrem", "zscore",
)
#: Script calls, the failure stream, connection handling, the durability check and the replica wait.
RUNTIME_COMMANDS = (
    "evalsha", "eval", "script|load", "script|exists", "ping", "info", "hello",
    "client|setname", "client|getname", "client|id", "xadd", "pexpire",
    # a handler failure's verdict in its marker (postbox.effects.verdicts); the group registry
    "get", "set", "exists", "hgetall", "hset", "del",
    # the wait for replicas after each apply (postbox.effects.replicas)
    "wait",
)
#: What `postbox trace` / `postbox doctor` read.
CLI_COMMANDS = ("get", "exists", "pttl", "type", "scan", "dbsize", "xrange", "xrevrange", "xlen")
#: Reads of a consumer's own state (the demo's invariant checks, dashboards) and UNLINK, which
#: gives nothing DEL (needed by the undo) does not already give.
STATE_COMMANDS = ("hlen", "hexists", "llen", "lrange", "scard", "sismember", "smembers", "zcard", "zrange", "ttl", "unlink")


#: The durability wait under ``appendfsync everysec`` (Redis 7.2+). Granted only for a server that
#: has it: Redis 7.0 refuses an ACL naming a command it does not know, and will not start.
WAITAOF_COMMANDS = ("waitaof",)


def consumer_commands(*, waitaof: bool = False) -> list[str]:
    extra = set(WAITAOF_COMMANDS) if waitaof else set()
    return sorted(set(SCRIPT_COMMANDS) | set(RUNTIME_COMMANDS) | set(CLI_COMMANDS) | set(STATE_COMMANDS) | extra)


def key_patterns(environ: "dict[str, str] | os._Environ[str] | None" = None) -> tuple[str, ...]:
    """``POSTBOX_REDIS_KEY_PATTERNS`` (comma-separated globs), else ``postbox:*`` and ``{*``."""
    env = os.environ if environ is None else environ
    raw = env.get(KEY_PATTERNS_ENV, "")
    patterns = tuple(p.strip() for p in raw.split(",") if p.strip())
    for p in patterns:
        if any(c.isspace() for c in p):
            raise ValueError(f"{KEY_PATTERNS_ENV}: key pattern {p!r} contains whitespace")
    return patterns or DEFAULT_KEY_PATTERNS


def consumer_rules(patterns: Sequence[str] = DEFAULT_KEY_PATTERNS, *, waitaof: bool = False) -> list[str]:
    """The ACL rules of the consumer user, password not included (``ACL SETUSER`` / aclfile syntax);
    ``waitaof``: the server has WAITAOF (7.2+), which the consumer then needs under ``everysec``."""
    return ["resetkeys", *(f"~{p}" for p in patterns), "resetchannels", "-@all",
            *(f"+{c}" for c in consumer_commands(waitaof=waitaof))]  # fmt: skip


#: The effect keys a group's user gets unless told otherwise: the hash-tagged aggregate keys.
DEFAULT_EFFECT_PATTERNS = ("{*",)


def group_user(group: str) -> str:
    """The default name of a group's user: ``postbox_<group>``."""
    return f"postbox_{group}"


def group_key_patterns(group: str, effect_patterns: Sequence[str] = DEFAULT_EFFECT_PATTERNS,
                       *, namespace: str = DEFAULT_NAMESPACE) -> tuple[str, ...]:  # fmt: skip
    """The key patterns of ``group``'s user: its layout's keys, then ``effect_patterns``.

    Raises :class:`~postbox.errors.ConfigError` for a group holding ``}`` (another group's marker pattern could match its
    markers, see :meth:`~postbox.effects.keys.KeyLayout.acl_patterns`) and for an effect pattern
    that could match a ``<namespace>:`` key (it would give the user every group's markers)."""
    if any(c.isspace() or c == "\0" for c in group):
        raise ConfigError(
            f"consumer group {group!r} holds whitespace or NUL, which Redis refuses in an ACL key pattern",
            fix="rename the group, or keep the shared consumer user for it",
        )
    if "}" in group:
        raise ConfigError(
            f"consumer group {group!r} holds '}}': another group's user could match its markers, so no user "
            "limited to one group can be made for it",
            fix="rename the group, or keep the shared consumer user for it",
        )
    for pattern in effect_patterns:
        _check_pattern(pattern)
        if _may_match_prefix(pattern, f"{namespace}:"):
            raise ConfigError(
                f"effect key pattern {pattern!r} could match postbox's own keys ({namespace}:...), every group's markers among them",
                fix="give the patterns of the handler's own keys, e.g. '{order:*' or 'app:*'",
            )
    layout = KeyLayout(namespace, group, slot_aligned=False)
    return (*(p.decode("utf-8", "surrogateescape") for p in layout.acl_patterns()), *effect_patterns)


def group_rules(group: str, effect_patterns: Sequence[str] = DEFAULT_EFFECT_PATTERNS, *, waitaof: bool = False,
                namespace: str = DEFAULT_NAMESPACE) -> list[str]:  # fmt: skip
    """The ACL rules of ``group``'s own user (see :func:`group_key_patterns`), password not
    included: the consumer's commands on that group's keys and the effect patterns alone."""
    return consumer_rules(group_key_patterns(group, effect_patterns, namespace=namespace), waitaof=waitaof)


def _check_pattern(pattern: str) -> None:
    if not pattern or any(c.isspace() or c == "\0" for c in pattern):
        raise ConfigError(f"key pattern {pattern!r} is empty or holds whitespace or NUL", fix="Redis refuses them in ACL key patterns: leave them out")


def _may_match_prefix(pattern: str, prefix: str) -> bool:
    """Whether some key starting with ``prefix`` may match the glob ``pattern`` (conservative:
    ``?`` and a ``[...]`` class are taken to match any one character, ``*`` anything)."""
    i = 0
    for want in prefix:
        if i >= len(pattern):
            return False
        c = pattern[i]
        if c == "*":
            return True
        if c == "?":
            i += 1
        elif c == "[":
            end = pattern.find("]", i + 2)
            i = len(pattern) if end < 0 else end + 1
        else:
            if c == "\\" and i + 1 < len(pattern):
                i += 1
                c = pattern[i]
            if c != want:
                return False
            i += 1
    return True


def password_hash(password: str) -> str:
    """The ``#<sha256>`` form: the aclfile never holds a password in clear."""
    return "#" + hashlib.sha256(password.encode()).hexdigest()


def aclfile(admin_password: str, consumer_password: str, patterns: Iterable[str] = DEFAULT_KEY_PATTERNS,
            *, waitaof: bool = False) -> str:  # fmt: skip
    """An aclfile: ``default`` (everything, for administration and health checks) and the consumer
    (``waitaof``: for a server with WAITAOF, see :func:`consumer_rules`)."""
    lines = [
        f"user default on {password_hash(admin_password)} ~* &* +@all",
        " ".join(["user", CONSUMER_USER, "on", password_hash(consumer_password), *consumer_rules(tuple(patterns), waitaof=waitaof)]),
    ]
    return "\n".join(lines) + "\n"


__all__ = [
    "CONSUMER_USER", "DEFAULT_EFFECT_PATTERNS", "DEFAULT_KEY_PATTERNS", "KEY_PATTERNS_ENV", "WAITAOF_COMMANDS", "aclfile",
    "consumer_commands", "consumer_rules", "group_key_patterns", "group_rules", "group_user", "key_patterns", "password_hash",
]
