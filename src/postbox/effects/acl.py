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
    "CONSUMER_USER", "DEFAULT_KEY_PATTERNS", "KEY_PATTERNS_ENV", "WAITAOF_COMMANDS", "aclfile", "consumer_commands",
    "consumer_rules", "key_patterns", "password_hash",
]
