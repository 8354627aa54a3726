"""Key names and hash slots: where an event's effect keys, dedupe marker and failure stream live.

Redis Cluster runs one script call on one node, and Redis checks that all keys of the call share
one hash slot (16384 slots; the slot of a key is CRC16 of the key, or of its hash tag: the part
between the first ``{`` and the next ``}``, when not empty). So every key one event touches must
share a slot: give them a common hash tag, e.g. with :func:`aggregate_keys`::

    k = aggregate_keys("order", event.aggregate_id)      # tag {order:<id>}
    fx.hset(k("state"), {"status": "paid"}).sadd(k("items"), "sku-1")

The dedupe marker and the failure stream of the event then borrow the same tag (the event's
*anchor*, see :func:`anchor_of`), so the whole apply is one slot. Marker names are the same on a
single server and on a cluster, so moving to a cluster keeps every marker valid.
"""

from __future__ import annotations

from binascii import crc_hqx
from collections.abc import Iterable
from functools import lru_cache

from postbox.errors import InvalidEffectError

SLOTS = 16384


def hashed_part(key: bytes) -> bytes:
    """The part of ``key`` Redis Cluster hashes: its hash tag if it has a non-empty one, else all."""
    start = key.find(b"{")
    if start >= 0:
        end = key.find(b"}", start + 1)
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


def anchor_of(keys: Iterable[bytes], fallback: bytes) -> bytes:
    """The hash tag text the marker and failure stream of an event use: the hashed part of its
    first key, so they land in that key's slot. ``fallback`` (the event id) anchors an event
    without keys. A hashed part holding ``}`` (a key without a tag, such as ``a}b``) cannot be
    written between braces; the slot's canonical tag (:func:`slot_tag`) stands in for it."""
    for key in keys:
        part = hashed_part(key)
        if b"}" in part or not part:
            return slot_tag(crc_hqx(part, 0) % SLOTS)
        return part
    return fallback if b"}" not in fallback and fallback else slot_tag(key_slot(fallback))


class KeyLayout:
    """Names of postbox's own keys for one consumer group.

    - dedupe marker: ``<ns>:{<anchor>}:seen:<group>:<event id>`` (string, TTL = marker TTL)
    - failure stream: ``<ns>:failures:<group>`` on a single server (one stream to read), or
      ``<ns>:{<anchor>}:failures:<group>`` when ``slot_aligned`` (Redis Cluster: it must share the
      event's slot); capped with MAXLEN ~ and expiring after the marker TTL without failures.
    """

    def __init__(self, namespace: str, group: str, *, slot_aligned: bool) -> None:
        if not namespace or any(c in namespace for c in "{}"):
            raise InvalidEffectError(f"key namespace {namespace!r} must be non-empty and hold no braces")
        if not group:
            raise InvalidEffectError("consumer group name is empty")
        self.namespace = namespace.encode("utf-8")
        self.group = group.encode("utf-8")
        self.slot_aligned = slot_aligned

    def marker(self, event_id: bytes, anchor: bytes) -> bytes:
        return b"%s:{%s}:seen:%s:%s" % (self.namespace, anchor, self.group, event_id)

    def failures(self, anchor: bytes) -> bytes:
        if self.slot_aligned:
            return b"%s:{%s}:failures:%s" % (self.namespace, anchor, self.group)
        return b"%s:failures:%s" % (self.namespace, self.group)

    def failures_pattern(self) -> bytes:
        """A SCAN pattern matching every failure stream of this group (both layouts)."""
        return b"%s:*failures:%s" % (self.namespace, _glob_escape(self.group))


def _glob_escape(text: bytes) -> bytes:
    out = bytearray()
    for byte in text:
        if byte in b"*?[]\\":
            out += b"\\"
        out.append(byte)
    return bytes(out)


def hash_tag(*parts: str | int) -> str:
    """``{part:part}``: a hash tag for keys that must share a slot. Parts may not contain ``}``."""
    text = ":".join(str(p) for p in parts)
    if not text or "}" in text:
        raise InvalidEffectError(
            f"cannot build a hash tag from {parts!r}: it must be non-empty and hold no '}}'",
            fix="use an identifier without '}' (or hash it first) as the tag",
        )
    return "{" + text + "}"


def aggregate_keys(aggregate_type: str, aggregate_id: str | int):
    """A key maker whose keys all carry the tag ``{<aggregate_type>:<aggregate_id>}``.

    ``aggregate_keys("order", 42)("state")`` is ``"{order:42}:state"``; with no parts the tag alone.
    Every key made by one maker shares one slot with the event's marker and failure stream.
    """
    tag = hash_tag(aggregate_type, aggregate_id)

    def make(*parts: str | int) -> str:
        return ":".join([tag, *(str(p) for p in parts)])

    make.tag = tag  # type: ignore[attr-defined]
    return make


def describe_slots(keys: Iterable[bytes]) -> str:
    """``'a' → slot 15495, 'b' → slot 3300`` for error messages."""
    return ", ".join(f"{_show(k)} → slot {key_slot(k)}" for k in keys)


def _show(key: bytes) -> str:
    text = key.decode("utf-8", "backslashreplace")
    return repr(text if len(text) <= 80 else text[:77] + "...")
