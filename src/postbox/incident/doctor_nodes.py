"""`postbox doctor`'s node checks: every Kafka broker and every Redis node, not only the one answering.

Why: on a replicated topology the pipeline keeps working with a node down — that is the point of
replicas — so nothing else tells the on-call engineer that the next failure is no longer
survivable. These checks read what each engine reports about its nodes (Kafka's metadata with
each partition's in-sync replicas; Sentinel's view of the primary and its replicas; a server's
``INFO replication``) and say which node is missing, with the fix.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: What each kind of problem is, for the check's fix line.
BROKER_FIX = "start the missing broker (`postbox up` on the local stack); until it is back one more failure stops writes"
SENTINEL_FIX = "start the missing Sentinel (`postbox up` on the local stack): a failover needs a majority of them"
REPLICA_FIX = "start the replica or wait for its sync (`postbox up` on the local stack); until then a failover may lose applies"


@dataclass(frozen=True)
class NodesVerdict:
    """One line of the doctor: ``ok``/``warn``/``fail``, what was found, and the fix when not ok."""

    status: str
    detail: str
    fix: str | None = None


def kafka_nodes(brokers: Mapping[int, str], controller: int | None,
                partitions: Mapping[str, Sequence[tuple[Sequence[int], Sequence[int]]]]) -> NodesVerdict:
    """From the metadata: the brokers (id → address), the controller, and per outbox topic each
    partition's (replicas, in-sync replicas). Under-replicated partitions name the brokers missing."""
    listed = ", ".join(f"{node_id} {address}" for node_id, address in sorted(brokers.items()))
    ctrl = f"; controller {controller}" if controller is not None and controller >= 0 else ""
    missing: dict[int, int] = {}
    under = 0
    for topic_partitions in partitions.values():
        for replicas, isrs in topic_partitions:
            gone = set(replicas) - set(isrs)
            if gone:
                under += 1
                for node_id in gone:
                    missing[node_id] = missing.get(node_id, 0) + 1
    if not under:
        return NodesVerdict("ok", f"{len(brokers)} broker(s): {listed}{ctrl}; every outbox partition fully in sync")
    out = ", ".join(f"broker {node_id} ({count} partition(s))" for node_id, count in sorted(missing.items()))
    return NodesVerdict("warn", f"{len(brokers)} broker(s): {listed}{ctrl}; {under} outbox partition(s) under-replicated, "
                                f"out of sync: {out}", BROKER_FIX)


def redis_replication(info: Mapping[str, Any], address: str) -> NodesVerdict:
    """A server's own ``INFO replication``: a primary and its replicas (each with its lag in bytes),
    or a replica — which refuses the consumers' writes."""
    if info.get("role") != "master":
        return NodesVerdict("fail", f"{address} is a replica of {info.get('master_host')}:{info.get('master_port')}: "
                                    "it refuses writes", "point POSTBOX_REDIS_URL at the primary, or at the Sentinels "
                                                         "(redis+sentinel://…/<service>) so a promotion is followed")
    offset = int(info.get("master_repl_offset", 0) or 0)
    replicas = [value for key, value in sorted(info.items()) if key.startswith("slave") and isinstance(value, Mapping)]
    if not replicas:
        return NodesVerdict("ok", f"{address}: primary without replicas (a failover has nowhere to go)")
    lines = [f"{r.get('ip')}:{r.get('port')} {r.get('state')} lag {max(0, offset - int(r.get('offset', 0) or 0))} B"
             for r in replicas]
    behind = [r for r in replicas if r.get("state") != "online"]
    status = "warn" if behind else "ok"
    return NodesVerdict(status, f"{address}: primary with {len(replicas)} replica(s): {'; '.join(lines)}",
                        REPLICA_FIX if behind else None)


def sentinel_view(answers: Mapping[str, tuple[str, int] | None], replicas: Sequence[Mapping[str, Any]], service: str) -> NodesVerdict:
    """Every Sentinel's answer for ``service`` (None: it did not answer) and the replicas one of them
    lists: all must name the same primary, a majority must answer, and the replicas must be up."""
    named = {addr for addr in answers.values() if addr is not None}
    silent = sorted(sentinel for sentinel, addr in answers.items() if addr is None)
    if len(named) > 1:
        views = "; ".join(f"{s} names {a[0]}:{a[1]}" for s, a in sorted(answers.items()) if a)
        return NodesVerdict("fail", f"the Sentinels of {service} disagree on the primary: {views}",
                            "wait for the failover to finish (failover-timeout) or check the Sentinels' logs for a split")
    if not named:
        return NodesVerdict("fail", f"no Sentinel names a primary for {service} ({', '.join(silent)} silent)", SENTINEL_FIX)
    host, port = next(iter(named))
    detail = f"{len(answers) - len(silent)} of {len(answers)} Sentinel(s) name {host}:{port}; replicas: {_replicas_line(replicas)}"
    return _silent_verdict(detail, silent, len(answers)) or _replicas_verdict(detail, replicas)


def _replicas_line(replicas: Sequence[Mapping[str, Any]]) -> str:
    return ", ".join(f"{r.get('ip')}:{r.get('port')} ({r.get('flags')})" for r in replicas) or "none"


def _silent_verdict(detail: str, silent: Sequence[str], total: int) -> NodesVerdict | None:
    """A fail without a majority of Sentinels answering (no failover possible), a warn with one silent."""
    if not silent:
        return None
    if total - len(silent) <= total // 2:
        return NodesVerdict("fail", f"{detail}; silent: {', '.join(silent)} — no majority for a failover", SENTINEL_FIX)
    return NodesVerdict("warn", f"{detail}; silent: {', '.join(silent)}", SENTINEL_FIX)


def _replicas_verdict(detail: str, replicas: Sequence[Mapping[str, Any]]) -> NodesVerdict:
    down = [r for r in replicas if any(flag in str(r.get("flags", "")) for flag in ("s_down", "o_down", "disconnected"))]
    if down or not replicas:
        return NodesVerdict("warn", detail, REPLICA_FIX)
    return NodesVerdict("ok", detail)
