"""A Redis user per consumer group: its markers (failure verdicts included) and failure streams, no other
group's. With the one shared consumer user any service could delete any group's markers (and so
apply another team's events twice); :func:`postbox.effects.acl.group_rules` limits a user to the
keys of its own group's layout plus the effect key patterns it is given.

Checked against a real redis-server's ACL: ``ACL DRYRUN`` (the server's own permission check of
a command as that user) for the property over group names, and the real engine running as the
user for the rest."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from postbox.effects import Effects, EffectsEngine, EventRef
from postbox.effects.acl import group_key_patterns, group_rules, group_user
from postbox.effects.keys import KeyLayout
from postbox.errors import ConfigError
from tests.support.redis_servers import RedisServer

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with RedisServer() as s:
        yield s


@pytest.fixture(scope="module")
def admin(server: RedisServer) -> Iterator[redis.Redis]:
    with server.client() as client:
        yield client


def _allowed(admin: redis.Redis, user: str, *command: bytes | str) -> bool:
    """The server's own verdict on ``command`` run as ``user`` (nothing is run)."""
    reply = admin.execute_command("ACL", "DRYRUN", user, *command)
    return reply == b"OK"


def _keys_of(group: str, event_id: str, tag: str) -> list[bytes]:
    """Every key the runtime writes for one event of ``group``: marker, both failure-stream
    layouts."""
    shared, aligned = KeyLayout("postbox", group, slot_aligned=False), KeyLayout("postbox", group, slot_aligned=True)
    eid, raw_tag = event_id.encode(), tag.encode()
    return [shared.marker(eid, raw_tag), shared.failures(raw_tag), aligned.failures(raw_tag)]


#: Group names: the marker's separators, the glob characters and the escape character, and
#: anything else a group id may hold except ``}`` and whitespace (refused, see
#: test_groups_no_user_can_isolate_are_refused).
_GROUP_TEXT = st.text(alphabet=st.sampled_from("ab:%*?[]\\^{-.é"), min_size=1, max_size=8) | st.text(
    alphabet=st.characters(blacklist_characters="}\x85", blacklist_categories=("Cs", "Cc", "Zs", "Zl", "Zp")), min_size=1, max_size=10)
#: Event ids: the rule of postbox.ids (printable ASCII) without ``}``; the outbox's are UUIDs.
_IDS = st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E, blacklist_characters="}"), min_size=1, max_size=40)
_TAGS = st.text(min_size=0, max_size=20)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(a=_GROUP_TEXT, b=_GROUP_TEXT, event_id=_IDS, tag=_TAGS)
@example(a="a", b="a:b", event_id="c", tag="order:1")
@example(a="a:b", b="a", event_id="b:c", tag="order:1")
@example(a="a%25b", b="a%b", event_id="e", tag="t")  # a legacy-layout pattern for a%25b would reach a%b's markers
@example(a="*", b="x", event_id="e", tag="t")
@example(a="a?", b="ab", event_id="e", tag="t")
@example(a="[ab]", b="a", event_id="e", tag="t")
@example(a="a\\", b="a", event_id="e", tag="t")
def test_a_group_users_keys_are_its_own(admin: redis.Redis, a: str, b: str, event_id: str, tag: str) -> None:
    """Group ``a``'s user reaches every key the runtime writes for ``a`` and none of ``b``'s,
    whatever the names hold (``a`` vs ``a:b``, glob characters, the escape character)."""
    user_a, user_b = "u-" + uuid.uuid4().hex[:10], "u-" + uuid.uuid4().hex[:10]
    admin.execute_command("ACL", "SETUSER", user_a, "on", "nopass", *group_rules(a, ()))
    admin.execute_command("ACL", "SETUSER", user_b, "on", "nopass", *group_rules(b, ()))
    try:
        for key in _keys_of(a, event_id, tag):
            assert _allowed(admin, user_a, "DEL", key), (a, key)
            assert a == b or not _allowed(admin, user_b, "DEL", key), (b, key)
    finally:
        admin.execute_command("ACL", "DELUSER", user_a, user_b)


def test_groups_no_user_can_isolate_are_refused(admin: redis.Redis) -> None:
    """A ``}`` in group ``x}`` would let another group's marker pattern (``…{*}:seen:<group>:*``)
    match ``x}``'s markers for chosen event ids; Redis refuses whitespace in a key pattern."""
    with pytest.raises(ConfigError, match=r"holds '\}'"):
        group_rules("billing}", ())
    for group in ("bill ing", "bill\ting", "bill\0ing"):
        with pytest.raises(ConfigError, match="whitespace or NUL"):
            group_rules(group, ())
    # the brace's reach, shown: group x's pattern matches a marker of group "x}" with a crafted id
    x_pattern = KeyLayout("postbox", "x", slot_aligned=False).acl_patterns()[0]
    user = "u-" + uuid.uuid4().hex[:10]
    admin.execute_command("ACL", "SETUSER", user, "on", "nopass", "~" + x_pattern.decode(), "+del")
    try:
        crafted = KeyLayout("postbox", "y}", slot_aligned=False).marker(b"seen:x:1", b"t")
        assert _allowed(admin, user, "DEL", crafted)
    finally:
        admin.execute_command("ACL", "DELUSER", user)


def test_effect_patterns_may_not_reach_postboxs_own_keys() -> None:
    """An effect pattern that could match ``postbox:…`` would give the user every group's markers."""
    for pattern in ("postbox:*", "*", "post*", "p?stbox:x", "[p]ostbox:*", "postbox:{*"):
        with pytest.raises(ConfigError, match="could match postbox's own keys"):
            group_rules("billing", (pattern,))
    assert "~{order:*" in group_rules("billing", ("{order:*",))
    assert "~app:*" in group_rules("billing", ("app:*",))


def test_the_engine_runs_as_its_groups_user(server: RedisServer, admin: redis.Redis) -> None:
    """The real engine as the user: an apply, a duplicate, a failure recorded in the failure
    stream, the group registry; another group's marker stays out of reach."""
    tag = uuid.uuid4().hex[:8]
    group, other = f"billing-{tag}", f"billing-{tag}:eu"
    admin.execute_command("ACL", "SETUSER", group_user(group), "on", ">pw", *group_rules(group, ("{*",)))
    with redis.Redis(host="127.0.0.1", port=server.port, username=group_user(group), password="pw") as client:
        engine = EffectsEngine(client, group, functions_dir=None)
        ok, bad = EventRef.for_aggregate("e1", "order", tag), EventRef.for_aggregate("e2", "order", tag)
        admin.set(f"{{order:{tag}}}:name", "not a hash")
        applied = engine.apply([(ok, Effects().hincrby(f"{{order:{tag}}}:totals", "cents", 500)),
                                (bad, Effects().hset(f"{{order:{tag}}}:name", {"x": "y"}))])  # fmt: skip
        assert [(r.applied, r.failed) for r in applied] == [(True, False), (False, True)]
        assert engine.apply_one(ok, Effects().hincrby(f"{{order:{tag}}}:totals", "cents", 500)).duplicate
        assert admin.hget(f"{{order:{tag}}}:totals", "cents") == b"500"
        assert admin.xlen(engine.failures_key(bad)) == 1
        foreign = EffectsEngine(admin, other, functions_dir=None)
        foreign.apply_one(ok, Effects().hincrby(f"{{order:{tag}}}:other", "cents", 1))
        with pytest.raises(redis.exceptions.NoPermissionError):
            client.delete(foreign.marker_key(ok))
        assert admin.exists(foreign.marker_key(ok))


def test_the_patterns_come_from_the_layout() -> None:
    """One place: the per-group patterns are the layout's, so a key kind added to or removed from
    the layout changes the user with it."""
    layout = KeyLayout("postbox", "a:b", slot_aligned=False)
    assert group_key_patterns("a:b", ()) == tuple(p.decode() for p in layout.acl_patterns())


def test_postbox_acl_prints_a_command_redis_cli_applies(server: RedisServer, admin: redis.Redis) -> None:
    """`postbox acl --group` prints an ``ACL SETUSER`` line a shell hands to redis-cli as it is."""
    import shlex
    import subprocess

    from tests.support.cli import invoke
    from tests.support.redis_servers import REDIS_CLI

    code, out = invoke("acl", "--group", "ship*ping", "--key-pattern", "{order:*")
    assert code == 0
    done = subprocess.run(f"{REDIS_CLI} -p {server.port} {out.strip()}", shell=True, capture_output=True, text=True, timeout=30)
    assert done.stdout.strip() == "OK", done
    assert shlex.split(out)[:3] == ["ACL", "SETUSER", group_user("ship*ping")]
    user = group_user("ship*ping")
    mine = KeyLayout("postbox", "ship*ping", slot_aligned=False).marker(b"e1", b"order:1")
    theirs = KeyLayout("postbox", "shipXping", slot_aligned=False).marker(b"e1", b"order:1")
    assert _allowed(admin, user, "DEL", mine) and _allowed(admin, user, "HSET", "{order:1}:state", "f", "v")
    assert not _allowed(admin, user, "DEL", theirs) and not _allowed(admin, user, "GET", "{cart:1}:state")
    assert not _allowed(admin, user, "FLUSHALL")
