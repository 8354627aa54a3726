"""Key names and hash slots: where an event's effect keys, dedupe marker and failure stream live.

Redis Cluster runs one script call on one node, and Redis checks that all keys of the call share
one hash slot (16384 slots; the slot of a key is CRC16 of the key, or of its hash tag: the part
between the first ``{`` and the next ``}``, when not empty). So every key one event touches must
share a slot: give them a common hash tag, e.g. with :func:`aggregate_keys`::

    k = aggregate_keys("order", event.aggregate_id)      # tag {order:<id>}
    fx.hset(k("state"), {"status": "paid"}).sadd(k("items"), "sku-1")

**The marker's identity is the consumer group and the event, never the effects.** Each event is
given to the engine as an :class:`EventRef`: its id plus its *routing tag*, the hash-tag text its
keys share. By default that is the aggregate's tag exactly as :func:`aggregate_keys` makes it
(``order:42`` for aggregate type ``order``, id ``42``); a handler whose keys live elsewhere
declares a *routing key* (any key of the slot it writes, see :func:`event_ref`). The marker is::

    <ns>:{<routing tag>}:seen:<group, escaped>:<event id>

so on Redis Cluster the marker, the failure stream and the handler's keys share one slot, and a
handler that returns other effects on redelivery (another order, more or fewer keys, none) still
meets the same marker. Changing a handler's routing key moves its markers, like renaming the
group: events already applied under the old key would apply again.

- A routing tag that cannot sit between braces (empty, holding ``}``, or longer than
  :data:`MAX_TAG_BYTES`, e.g. a 2 MB aggregate id) is replaced by the slot's canonical short tag
  (:func:`slot_tag`): same slot, short key.
- The group is escaped (``%`` → ``%25``, ``:`` → ``%3A``), so ``seen:<group>:<id>`` is unambiguous:
  group ``a:b`` with id ``c`` and group ``a`` with id ``b:c`` no longer share a key. A group
  without ``%`` or ``:`` is written as is.
- Marker names are the same on a single server and on a cluster, so moving to a cluster keeps
  every marker valid.

**Legacy layout** (before this version): the tag was the hashed part of the event's *first effect
key* (or the event id when it had none), the group unescaped — see :func:`legacy_anchor` and
:meth:`KeyLayout.legacy_marker`. The engine checks that key too during a transition period
(``legacy_markers``), so an upgrade does not apply events already marked under it again.
"""

from __future__ import annotations

from binascii import crc_hqx
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING


from postbox.errors import InvalidEffectError

if TYPE_CHECKING:
    from postbox.events import Event

SLOTS = 16384
#: Longest routing tag written into a key as is; a longer one (a huge aggregate id) is replaced
#: by the slot's canonical tag so markers stay short.
MAX_TAG_BYTES = 256
#: The hash tag's braces as byte values: ``bytes.find``/``in`` with an int is a plain memchr, with
#: a one-byte ``bytes`` it takes the needle's buffer first (~4x slower; this runs once per event).
_OPEN, _CLOSE = ord("{"), ord("}")


def hashed_part(key: bytes) -> bytes:
    """The part of ``key`` Redis Cluster hashes: its hash tag if it has a non-empty one, else all."""
    start = key.find(_OPEN)
    if start >= 0:
        end = key.find(_CLOSE, start + 1)
        if end > start + 1:
            return key[start + 1 : end]
    return key


def key_slot(key: bytes | str) -> int:
    """The Redis Cluster hash slot (0..16383) of ``key``."""
    if isinstance(key, str):
        key = key.encode("utf-8")
    return crc_hqx(hashed_part(key), 0) % SLOTS


@lru_cache(maxsize=1)
def _slot_tags() -> tuple[bytes, ...]:
    """For every slot, the shortest decimal string hashing to it (computed once, ~0.2 s)."""
    tags: list[bytes | None] = [None] * SLOTS
    missing, n = SLOTS, 0
    while missing:
        candidate = str(n).encode()
        slot = crc_hqx(candidate, 0) % SLOTS
        if tags[slot] is None:
            tags[slot] = candidate
            missing -= 1
        n += 1
    return tuple(t for t in tags if t is not None)


def slot_tag(slot: int) -> bytes:
    """A short string whose slot is ``slot``, usable between braces as a hash tag."""
    return _slot_tags()[slot]


def tag_text(text: str | bytes) -> bytes:
    """The text written between braces for a routing tag: ``text`` itself when it can sit there
    (non-empty, no ``}``, at most :data:`MAX_TAG_BYTES`), else the canonical tag of its slot, so
    the key still lands in the slot a ``{<text>}`` key would."""
    raw = text if type(text) is bytes else text.encode("utf-8") if isinstance(text, str) else bytes(text)  # the engine passes bytes
    if raw and _CLOSE not in raw and len(raw) <= MAX_TAG_BYTES:
        return raw
    return slot_tag(crc_hqx(raw, 0) % SLOTS)


@dataclass(frozen=True, slots=True)
class EventRef:
    """What the engine needs to know of an event: its id (the dedupe key) and its routing tag.

    ``tag`` is hash-tag text (no braces): by default ``<aggregate_type>:<aggregate_id>``, the tag
    :func:`aggregate_keys` gives the aggregate's keys. Build it with :func:`event_ref`, or
    :meth:`for_aggregate` / :meth:`routed` when there is no :class:`~postbox.events.Event`.
    """

    id: str
    tag: str

    @classmethod
    def for_aggregate(cls, event_id: str, aggregate_type: str, aggregate_id: str | int) -> "EventRef":
        """The default: the aggregate's tag, ``order:42``."""
        if cls is EventRef:
            return _event_ref(event_id, f"{aggregate_type}:{aggregate_id}")
        return cls(event_id, f"{aggregate_type}:{aggregate_id}")

    @classmethod
    def routed(cls, event_id: str, routing_key: str | bytes) -> "EventRef":
        """Route by a key: the event's slot is that key's slot (its hash tag, or the whole key)."""
        raw = routing_key.encode("utf-8") if isinstance(routing_key, str) else routing_key
        return cls(event_id, hashed_part(raw).decode("utf-8", "surrogateescape"))

    @property
    def slot(self) -> int:
        """The hash slot of the event's marker, failure stream and (on a cluster) effects."""
        return key_slot(b"{" + tag_text(self.tag_bytes) + b"}")

    @property
    def tag_bytes(self) -> bytes:
        return self.tag.encode("utf-8", "surrogateescape")


_new_ref = object.__new__
_set_id = EventRef.id.__set__  # type: ignore[attr-defined]  # the slot's member descriptor
_set_tag = EventRef.tag.__set__  # type: ignore[attr-defined]


def _event_ref(event_id: str, tag: str) -> EventRef:
    """``EventRef(event_id, tag)`` without the frozen ``__init__`` (two ``object.__setattr__``
    calls): the same object (equal, frozen, same repr) at ~60 % of the cost, for the consumer's
    per-event path. The caller passes ``str`` values, as ``__init__`` would be given."""
    ref = _new_ref(EventRef)
    _set_id(ref, event_id)
    _set_tag(ref, tag)
    return ref


@dataclass(frozen=True, slots=True)
class ReplayRef(EventRef):
    """An event copy an operator sent on purpose (``postbox dlq replay``): a failure verdict the
    group left in the event's marker does not bind it, so it runs (see
    :mod:`postbox.effects.verdicts`); an applied event's marker still makes it a duplicate."""

    @classmethod
    def of(cls, ref: EventRef) -> "ReplayRef":
        return cls(ref.id, ref.tag)


#: A handler's routing key: given the event, a key of the slot its effects write.
RoutingKey = Callable[["Event"], "str | bytes"]


def event_ref(event: "Event", routing_key: RoutingKey | None = None) -> EventRef:
    """The :class:`EventRef` of ``event``: routed by ``routing_key(event)`` when the handler
    declares one, else by its aggregate (``<aggregate_type>:<aggregate_id>``)."""
    if routing_key is None:  # for_aggregate's ref, one call less (once per handled event)
        return _event_ref(event.id, f"{event.aggregate_type}:{event.aggregate_id}")
    key = routing_key(event)
    if not isinstance(key, (str, bytes)) or not key:
        raise InvalidEffectError(
            f"event {event.id}: the handler's routing key returned {key!r:.80}, expected a non-empty key (str)",
            fix="return a key of the slot the handler writes, e.g. aggregate_keys('customer', cid)('state')",
        )
    return EventRef.routed(event.id, key)


def legacy_anchor(keys: Iterable[bytes], fallback: bytes) -> bytes:
    """The marker tag of the legacy layout (read during the upgrade transition only): the hashed
    part of the event's first effect key, or ``fallback`` (the event id) without keys; the slot's
    canonical tag when that text cannot sit between braces."""
    for key in keys:
        part = hashed_part(key)
        if b"}" in part or not part:
            return slot_tag(crc_hqx(part, 0) % SLOTS)
        return part
    return fallback if b"}" not in fallback and fallback else slot_tag(key_slot(fallback))


def escape_group(group: bytes) -> bytes:
    """``%`` → ``%25`` and ``:`` → ``%3A``: the group never holds the separator of the marker key."""
    return group.replace(b"%", b"%25").replace(b":", b"%3A")


class KeyLayout:
    """Names of postbox's own keys for one consumer group.

    - dedupe marker: ``<ns>:{<tag>}:seen:<escaped group>:<event id>`` (``1``, or a failure verdict: :mod:`postbox.effects.verdicts`; TTL = marker
      TTL); ``<tag>`` is :func:`tag_text` of the event's routing tag, the group escaped by
      :func:`escape_group` (the id is last, so it may hold anything).
    - legacy marker (during the upgrade transition):
      ``<ns>:{<legacy anchor>}:seen:<group>:<event id>``, see :func:`legacy_anchor`. Read before
      the marker; written beside it only where :meth:`legacy_writable` (the unescaped group and
      the id could otherwise spell another group's key, as they did in the previous release).
    - failure stream: ``<ns>:failures:<group>`` on a single server (one stream to read), or
      ``<ns>:{<tag>}:failures:<group>`` when ``slot_aligned`` (Redis Cluster: it must share the
      event's slot); capped with MAXLEN ~ and expiring after the marker TTL without failures.

    :meth:`acl_patterns` lists every one of them as ACL key patterns: the Redis user of one
    group (:func:`postbox.effects.acl.group_rules`) is made from it, so a key kind added here
    must be added there too, and one removed goes from the user with it.
    """

    def __init__(self, namespace: str, group: str, *, slot_aligned: bool) -> None:
        if not namespace or any(c in namespace for c in "{}"):
            raise InvalidEffectError(f"key namespace {namespace!r} must be non-empty and hold no braces")
        if not group:
            raise InvalidEffectError("consumer group name is empty")
        self.namespace = namespace.encode("utf-8")
        self.group = group.encode("utf-8")
        self._escaped_group = escape_group(self.group)
        #: The group needs no escaping: its legacy marker is the current one when the tags agree.
        self.group_unescaped = self._escaped_group == self.group
        self._group_colon_free = b":" not in self.group
        self.slot_aligned = slot_aligned
        self._shared_failures = b"%s:failures:%s" % (self.namespace, self.group)
        self._marker_head = b"%s:{" % self.namespace
        self._marker_tail = b"}:seen:%s:" % self._escaped_group

    def marker(self, event_id: bytes, tag: bytes) -> bytes:
        """The marker of ``event_id`` routed by ``tag`` (any routing tag; made safe here)."""
        return self.marker_in(event_id, tag_text(tag))

    def marker_in(self, event_id: bytes, text: bytes) -> bytes:
        """The marker of ``event_id`` whose routing tag is already :func:`tag_text` ``text`` (the
        engine computes that once per event for the marker, the legacy check and the failures)."""
        return b"".join((self._marker_head, text, self._marker_tail, event_id))  # one copy, not three

    def legacy_marker(self, event_id: bytes, anchor: bytes) -> bytes:
        """The marker key of the legacy layout (``anchor`` from :func:`legacy_anchor`)."""
        return b"%s:{%s}:seen:%s:%s" % (self.namespace, anchor, self.group, event_id)

    def legacy_writable(self, event_id: bytes) -> bool:
        """Whether this release may write the event's legacy marker too: neither the group nor
        the id holds ``:``, so ``<group>:<event id>`` splits one way only and no other group's
        event can read the key as its own (group ``a:b`` with id ``c`` and group ``a`` with id
        ``b:c`` spell the same legacy key)."""
        return self._group_colon_free and b":" not in event_id

    def marker_pattern(self, event_id: bytes) -> bytes:
        """A SCAN pattern matching the event's marker under any tag (current layout)."""
        return b"%s:*:seen:%s:%s" % (self.namespace, glob_escape(self._escaped_group), glob_escape(event_id))

    def failures(self, tag: bytes) -> bytes:
        return self.failures_in(tag_text(tag)) if self.slot_aligned else self._shared_failures

    def failures_in(self, text: bytes) -> bytes:
        """The failure stream for a routing tag already made :func:`tag_text` ``text``."""
        if self.slot_aligned:
            return b"%s:{%s}:failures:%s" % (self.namespace, text, self.group)
        return self._shared_failures  # one stream for the group: built once, asked once per event

    def acl_patterns(self) -> tuple[bytes, ...]:
        """Redis ACL key patterns (globs) covering every key of this group's layout and no other
        group's: markers (current layout; the legacy one only where it is the same pattern, a
        group needing no escaping), both failure-stream layouts (failure verdicts live in the
        markers), and the group registry (one hash all groups share, see :mod:`postbox.effects.groups`).

        Why another group's keys cannot match: the escaped group holds no ``:``, so
        ``seen:<escaped>:`` ends where the group does (``a`` never
        reaches ``a:b``, written ``a%3Ab``); the raw group of a failure stream is the key's end.
        Glob characters of the group are escaped. Only a ``}`` after the tag could realign a
        pattern, so neither a group nor an event id may hold one for the isolation to hold
        (the outbox's ids are UUIDs; :func:`postbox.effects.acl.group_rules` refuses such a group).
        A legacy marker of a group that needs escaping is not covered: it is spelt with the raw
        group, which another group's escaped name can equal (``a%b`` and ``a%25b``)."""
        from postbox.effects.groups import registry_key

        ns = glob_escape(self.namespace)
        return (
            b"%s:{*}:seen:%s:*" % (ns, glob_escape(self._escaped_group)),
            b"%s:failures:%s" % (ns, glob_escape(self.group)),
            b"%s:{*}:failures:%s" % (ns, glob_escape(self.group)),
            glob_escape(registry_key(self.namespace.decode("utf-8"))),
        )

    def failures_pattern(self) -> bytes:
        """A SCAN pattern matching every failure stream of this group (both layouts)."""
        return b"%s:*failures:%s" % (self.namespace, glob_escape(self.group))


def glob_escape(text: bytes) -> bytes:
    """``text`` with Redis glob characters (``* ? [ ] \\``) escaped, for a SCAN MATCH pattern."""
    out = bytearray()
    for byte in text:
        if byte in b"*?[]\\":
            out += b"\\"
        out.append(byte)
    return bytes(out)


def hash_tag(*parts: str | int) -> str:
    """``{part:part}``: a hash tag for keys that must share a slot. Parts may not contain ``}``."""
    # Two parts (aggregate_keys, once per handled event) without a generator; "%s" is str(p).
    text = "%s:%s" % parts if len(parts) == 2 else ":".join(map(str, parts))
    if not text or "}" in text:
        raise InvalidEffectError(
            f"cannot build a hash tag from {parts!r}: it must be non-empty and hold no '}}'",
            fix="use an identifier without '}' (or hash it first) as the tag",
        )
    return "{" + text + "}"


class KeyMaker:
    """Keys sharing one hash tag: ``maker("state")`` is ``"<tag>:state"``, ``maker()`` the tag
    alone, ``maker("item", 3)`` is ``"<tag>:item:3"`` (parts joined by ``:`` as ``str``). Made by
    :func:`aggregate_keys`; ``tag`` is the tag with its braces, e.g. ``{order:42}``.

    A small class rather than a closure: a handler makes one per event, and a closure with a
    ``tag`` attribute cost a function object and its ``__dict__`` each time."""

    __slots__ = ("tag",)

    def __init__(self, tag: str) -> None:
        self.tag = tag

    def __call__(self, *parts: str | int) -> str:
        if len(parts) == 1:  # the common form, without a generator
            return self.tag + ":" + str(parts[0])
        return ":".join((self.tag, *map(str, parts)))

    def __repr__(self) -> str:
        return f"KeyMaker({self.tag!r})"


def aggregate_keys(aggregate_type: str, aggregate_id: str | int) -> KeyMaker:
    """A key maker whose keys all carry the tag ``{<aggregate_type>:<aggregate_id>}``.

    ``aggregate_keys("order", 42)("state")`` is ``"{order:42}:state"``; with no parts the tag alone.
    Every key made by one maker shares one slot with the marker and failure stream of the
    aggregate's events (their default routing tag is the same text, ``order:42``).
    """
    text = "%s:%s" % (aggregate_type, aggregate_id)  # hash_tag's text, without its call (once per event)
    return KeyMaker("{" + text + "}" if "}" not in text else hash_tag(aggregate_type, aggregate_id))


def describe_slots(keys: Iterable[bytes]) -> str:
    """``'a' → slot 15495, 'b' → slot 3300`` for error messages."""
    return ", ".join(f"{_show(k)} → slot {key_slot(k)}" for k in keys)


def _show(key: bytes) -> str:
    text = key.decode("utf-8", "backslashreplace")
    return repr(text if len(text) <= 80 else text[:77] + "...")
