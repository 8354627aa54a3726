"""`postbox acl`: the Redis ACL of a consumer, printed for an administrator to apply.

Without ``--group`` the shared consumer user (every group's keys: ``POSTBOX_REDIS_KEY_PATTERNS``);
with it, a user limited to that group's own keys and the handler's effect key patterns, so one
service cannot delete another's markers. Printed, never applied: the consumer's credentials
cannot (and must not) change ACLs.
"""

from __future__ import annotations

import shlex
from typing import List, Optional

import typer

from postbox.cli.output import err_console


def register(app: typer.Typer) -> None:
    app.command("acl", help="Print the Redis ACL of a consumer user: the shared one, or one limited to a group's keys (--group).")(acl)


def acl(
    group: Optional[str] = typer.Option(None, "--group", "-g", metavar="GROUP", help="A user for this consumer group alone: its markers and failure streams, "
                                        "no other group's."),
    key_pattern: Optional[List[str]] = typer.Option(None, "--key-pattern", "-k", metavar="PATTERN", help="An effect key pattern the handlers write "
                                                    "(repeat it). With --group: default '{*', and none may match postbox:... keys. "
                                                    "Without: default POSTBOX_REDIS_KEY_PATTERNS, else postbox:* and {*."),
    user: Optional[str] = typer.Option(None, "--user", metavar="NAME", help="The user's name (default postbox_<group>, or postbox_consumer)."),
    waitaof: bool = typer.Option(False, "--waitaof", help="Grant WAITAOF (a Redis 7.2+ / Valkey server; needed under appendfsync everysec)."),
    rules_only: bool = typer.Option(False, "--rules", help="Print the rules alone, in aclfile syntax (after 'user <name> on #<sha256>')."),
) -> None:
    from postbox.effects.acl import CONSUMER_USER, DEFAULT_EFFECT_PATTERNS, consumer_rules, group_rules, group_user, key_patterns

    if group is not None:
        rules = group_rules(group, tuple(key_pattern or DEFAULT_EFFECT_PATTERNS), waitaof=waitaof)
        name = user or group_user(group)
    else:
        rules = consumer_rules(tuple(key_pattern or ()) or key_patterns(), waitaof=waitaof)
        name = user or CONSUMER_USER
    if rules_only:
        typer.echo(" ".join(rules))
        return
    typer.echo(" ".join(shlex.quote(part) for part in ("ACL", "SETUSER", name, *rules)))
    err_console.print(f"run it with redis-cli as an administrator, then set the password: ACL SETUSER {shlex.quote(name)} on >PASSWORD "
                      "(or #<sha256 of it>); ACL SAVE keeps it where the server uses an aclfile", highlight=False, markup=False)  # fmt: skip
