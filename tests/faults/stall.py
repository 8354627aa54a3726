"""What a fault run's wait for applied events was stuck on, said in the AssertionError itself.

Why: the CI hands back the pytest output and nothing else — not the run's tmp dir, not the consumer
logs — so a drain that times out ("waiting for all N committed events applied") must say there
and then where the missing events are: committed but not in the topic (Debezium/Connect stopped
streaming), in the topic past the group's committed offset (the consumer not applying them), the
consumer processes alive or not and what their threads are doing, the stack's components and the
connector's state, and when the pipeline last moved compared with the last kill.

Every section is read defensively (:func:`_section`): a part of the stack that is down must not
turn the diagnosis into another error that hides the timeout.
"""

from __future__ import annotations

import json
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, TopicPartition

if TYPE_CHECKING:
    from tests.faults.harness import Committed, FaultRun

#: Missing events described one by one.
FIRST_MISSING = 5
#: Log lines kept per consumer log, and of the newest logs only.
LOG_TAIL = 20
LOGS = 3
#: Python frames kept per thread of a stack dump (most recent first).
FRAMES = 8
#: Warnings and errors kept from the end of the Connect worker's log (Debezium's retries, a task
#: killed or orphaned, a rebalance), without the broker-unreachable lines that flood it.
CONNECT_LINES = 8
_CONNECT_NOISE = ("NetworkClient", "could not be established", "disconnected")


#: A wait for applied events past its timeout goes on while the count grew in the last STALL_S
#: seconds, up to MOST_TIMES its timeout (:meth:`Drain.deadline`).
STALL_S = 30.0
MOST_TIMES = 3.0


@dataclass
class Drain:
    """What a wait for applied events saw: the applied count when it began, and when it last grew."""

    started: float  # monotonic
    count_at_start: int
    last_count: int
    last_growth: float | None = None  # monotonic; None: it never grew during the wait

    def saw(self, count: int) -> int:
        if count > self.last_count:
            self.last_count, self.last_growth = count, time.monotonic()
        return count

    def deadline(self, timeout: float, *, stall_s: float = STALL_S, most: float = MOST_TIMES) -> float:
        """When a wait for applied events gives up: ``timeout`` after it began, or later while the
        consumers are still applying — ``stall_s`` after the count last grew, at the most ``most``
        times ``timeout``. On a loaded host a consumer can drain a backlog (a Kafka restart's
        minutes of events) slower than the fixed timeouts assume; a stall (nothing applied for
        ``stall_s``) still fails at once, with the stall report."""
        nominal = self.started + timeout
        if self.last_growth is None:
            return nominal
        return min(max(nominal, self.last_growth + stall_s), self.started + timeout * most)


def stall_report(run: "FaultRun", committed: "list[Committed]", skip: set[str], drain: Drain, recovering: str = "") -> tuple[str, str]:
    """A one-line headline (for the summary line pytest prints) and the details, for a wait on
    ``committed`` (``skip``: events allowed to be missing, the marked ones) that timed out: the
    verdict's drain, or the recovery from a kill (``recovering``: which, and when)."""
    t0 = run.started
    applied = _section(lambda: _applied_ids(run), set())
    missing = [c for c in committed if c.id not in applied and c.id not in skip]
    located = _section(lambda: _located(run), {})
    offsets = _section(lambda: _offsets(run), {})
    stacks = _section(lambda: _dump_stacks(run), {})
    headline = _headline(missing, located, offsets, run, recovering)
    lines = [f"-- stall report ({run.replay or 'no replay key'}); times are seconds since the run started --"]
    lines += _missing_lines(missing, committed, applied, located, t0)
    lines += [f"   {line}" for line in _offset_lines(offsets)]
    lines += _timeline(run, committed, drain, t0, recovering)
    lines += _section(lambda: _emitter_lines(run, committed, t0), ["   emitter: could not describe it"])
    lines += _section(lambda: _stack_lines(run), ["   stack: could not read its status"])
    lines += _section(lambda: _connect_lines(run.stack.connect.log_path), ["   connect log: could not read it"])
    lines += _section(lambda: _consumer_lines(run, stacks), ["   consumers: could not read their logs"])
    return headline, "\n".join(lines)


def _section(read: Callable[[], Any], fallback: Any) -> Any:
    try:
        return read()
    except Exception as exc:  # the diagnosis never hides the timeout it explains
        if isinstance(fallback, list):
            return [*fallback, f"   ({type(exc).__name__}: {str(exc)[:200]})"]
        return fallback


def _applied_ids(run: "FaultRun") -> set[str]:
    """Every applied event id, read in one MULTI: a consumer still applying while the aggregates
    were read one by one would make a moving tail look like gaps."""
    pipe = run.redis.pipeline(transaction=True)
    for agg in run.emitter.ids:
        pipe.hkeys(f"{{{run.aggregate_type}:{agg}}}:applied")
    return {k.decode() for keys in pipe.execute() for k in keys}


def _located(run: "FaultRun") -> dict[str, tuple[int, int]]:
    from tests.faults.harness import read_topic

    return {eid: (p, o) for p, o, eid in read_topic(run.kafka_bootstrap, run.topic, timeout=30)}


def _offsets(run: "FaultRun") -> dict[int, tuple[int, int]]:
    """Per partition: the group's committed offset (-1001: none) and the topic's end."""
    ends = run.topic_ends()
    reader = Consumer({"bootstrap.servers": run.kafka_bootstrap, "group.id": run.group, "enable.auto.commit": False})
    try:
        done = reader.committed([TopicPartition(run.topic, p) for p in ends], timeout=10)
        return {tp.partition: (tp.offset, ends[tp.partition]) for tp in done}
    finally:
        reader.close()


def _headline(missing: "list[Committed]", located: dict[str, tuple[int, int]], offsets: dict[int, tuple[int, int]], run: "FaultRun",
              recovering: str) -> str:
    first = missing[0] if missing else None
    where = located.get(first.id) if first is not None else None
    at = f"{first.aggregate_id}#{first.seq} " + (f"at p{where[0]}@{where[1]}" if where else "NOT in the topic") if first else "none"
    groups = ", ".join(f"p{p} committed {c} end {e}" for p, (c, e) in sorted(offsets.items())) or "offsets unknown"
    alive = sum(1 for p in run.consumers.processes if p.alive())
    last = recovering or (run.kills[-1].component if run.kills else "none")
    return (f"stuck: {len(missing)} missing, first {at}; {sum(1 for c in missing if c.id not in located)} not in the topic; "
            f"{groups}; consumers alive {alive}/{len(run.consumers.processes)}; last kill {last}; {run.replay}")


def _missing_lines(missing: "list[Committed]", committed: "list[Committed]", applied: set[str],
                   located: dict[str, tuple[int, int]], t0: float) -> list[str]:
    if not missing:
        return ["   missing: none now (the drain ended just after the deadline?)"]
    index = {c.id: i for i, c in enumerate(committed)}
    tail = index[missing[0].id] == len(committed) - len(missing)
    lines = [f"   missing {len(missing)} of {len(committed)} committed (commits +{missing[0].at - t0:.1f} .. +{missing[-1].at - t0:.1f}; "
             + ("a contiguous tail" if tail else "NOT only a tail") + f"); {sum(1 for c in missing if c.id not in located)} of them not in the topic"]
    for c in missing[:FIRST_MISSING]:
        where = located.get(c.id)
        lines.append(f"     {c.id} {c.aggregate_id}#{c.seq} committed +{c.at - t0:.2f}: "
                     + (f"in the topic at p{where[0]}@{where[1]}" if where else "not in the topic"))
    last = next((c for c in reversed(committed) if c.id in applied), None)
    if last is not None:
        where = located.get(last.id)
        lines.append(f"   last applied (by commit order): {last.aggregate_id}#{last.seq} committed +{last.at - t0:.2f}"
                     + (f" at p{where[0]}@{where[1]}" if where else ""))
    return lines


def _offset_lines(offsets: dict[int, tuple[int, int]]) -> list[str]:
    if not offsets:
        return ["group offsets: could not read them"]
    return ["group committed / topic end: " + ", ".join(f"p{p} {c} / {e}" for p, (c, e) in sorted(offsets.items()))]


def _timeline(run: "FaultRun", committed: "list[Committed]", drain: Drain, t0: float, recovering: str) -> list[str]:
    kills = ", ".join(f"{k.component} +{k.at - t0:.1f}" + (f" (recovered +{k.at + k.recovery_s - t0:.1f})" if k.recovery_s is not None else "")
                      for k in run.kills)
    grew = f"last grew +{drain.last_growth - t0:.1f}" if drain.last_growth is not None else "never grew"
    wall = time.time() - time.monotonic()  # monotonic -> epoch, for the logs' timestamps
    last_commit = f"; the last commit +{committed[-1].at - t0:.1f}" if committed else ""
    last_kill = f" (the last at wall {_clock(run.kills[-1].at + wall)} UTC)" if run.kills else ""
    now = f"; recovering from {recovering}" if recovering else ""
    return [f"   kills: {kills or 'none'}{last_kill}{now}",
            f"   the wait began +{drain.started - t0:.1f} (wall {_clock(drain.started + wall)} UTC) at {drain.count_at_start} applied; "
            f"during it the applied count {grew}, now {drain.last_count}{last_commit}",
            f"   during the wait: {_rate(drain.last_count - drain.count_at_start, drain.started)} applied, "
            f"{_rate(sum(1 for c in committed if c.at >= drain.started), drain.started)} committed"]


def _rate(events: int, since: float) -> str:
    seconds = max(time.monotonic() - since, 1e-3)
    return f"{events} in {seconds:.0f} s ({events / seconds:.0f}/s)"


def _emitter_lines(run: "FaultRun", committed: "list[Committed]", t0: float) -> list[str]:
    """The writer load's state; its thread's stack when it committed nothing for 2 s while
    running (a writer stuck after a PostgreSQL restart leaves nothing to apply)."""
    e = run.emitter
    since = time.monotonic() - committed[-1].at if committed else None
    lines = [f"   emitter: {'running' if e.is_alive() else 'stopped'}, {e.transactions} transactions, commit failures {e.commit_failures} "
             f"({e.resolved_committed} had committed, {e.retried_transactions} retried)"
             + (f", error {e.error!r}" if e.error is not None else "") + (f", last commit {since:.1f} s ago" if since is not None else "")]
    frame = sys._current_frames().get(e.ident or -1)
    if e.is_alive() and not e.stop_flag.is_set() and (since is None or since > 2) and frame is not None:
        lines += [f"     {Path(f.filename).name} line {f.lineno} in {f.name}" for f in reversed(traceback.extract_stack(frame)[-FRAMES:])]
    return lines


def _clock(epoch: float) -> str:
    """UTC, as the consumer logs' ``ts``."""
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%H:%M:%S.%f")[:-3]


def _stack_lines(run: "FaultRun") -> list[str]:
    status = run.stack.status()
    parts = ", ".join(f"{n} {status[n]['state']}" for n in ("postgres", "redis", "kafka", "connect"))
    task = status.get("task", {})
    slot = status.get("slot", {})
    return [f"   stack: {parts}; connector {status['connector'].get('state')}; task {task.get('state')}"
            + (f" ({str(task['error'])[:200]})" if task.get("error") else "")
            + f"; slot {slot.get('state')} lag {slot.get('lag_bytes')} B"]


def _connect_lines(path: Path) -> list[str]:
    with open(path, "rb") as f:
        f.seek(max(0, f.seek(0, 2) - 400_000))
        tail = f.read().decode(errors="replace").splitlines()
    kept = [line for line in tail if line.startswith("[") and (" WARN " in line or " ERROR " in line)
            and not any(noise in line for noise in _CONNECT_NOISE)]
    return [f"   connect log ({path}), its last {CONNECT_LINES} warnings/errors:"] + [f"     {line[12:250]}" for line in kept[-CONNECT_LINES:]]


def _dump_stacks(run: "FaultRun") -> dict[Path, int]:
    """SIGUSR1 to every live consumer (faulthandler, registered by ConsumerProcess, writes each
    thread's stack into its log): where each log's dump begins."""
    sizes = {p.log_path: p.log_path.stat().st_size for p in run.consumers.processes if p.alive()}
    for p in run.consumers.processes:
        if p.alive():
            p.process.send_signal(signal.SIGUSR1)
    time.sleep(1.0)
    return sizes


def _consumer_lines(run: "FaultRun", stacks: dict[Path, int]) -> list[str]:
    processes = {p.log_path: p for p in run.consumers.processes + run.consumers.retired}
    paths = sorted(run.tmp.glob("consumer-*.log"), key=lambda p: int(p.stem.split("-")[-1]))
    lines = []
    for path in paths[-LOGS:]:
        p = processes.get(path)
        state = "?" if p is None else ("alive" if p.alive() else f"exited {p.process.returncode}")
        lines.append(f"   {path.name} (pid {p.process.pid if p else '?'}, {state}), its last {LOG_TAIL} log lines:")
        data = path.read_bytes()
        cut = stacks.get(path, len(data))
        body, dump = data[:cut].decode(errors="replace"), data[cut:].decode(errors="replace")
        lines += [f"     {_compact(line)}" for line in _json_lines(body)[-LOG_TAIL:]]
        if dump:
            lines.append("     threads (SIGUSR1, most recent call first):")
            lines += [f"     {line}" for line in _frames(dump.splitlines())]
    return lines


def _json_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("{")]


def _compact(line: str, width: int = 260) -> str:
    """``HH:MM:SS.mmm level msg key=value ...`` from a JSON log line (cut at ``width``)."""
    try:
        data = json.loads(line)
    except ValueError:
        return line[:width]
    ts = str(data.pop("ts", ""))[11:23]
    head = f"{ts} {data.pop('level', '')} {data.pop('msg', '')}"
    for key in ("logger", "group"):
        data.pop(key, None)
    rest = " ".join(f"{k}={v}" for k, v in data.items())
    return f"{head} {rest}"[:width]


def _frames(dump: Iterable[str]) -> list[str]:
    """faulthandler's dump, each thread cut to :data:`FRAMES` frames, paths to their file name."""
    out: list[str] = []
    kept = 0
    for line in dump:
        if line.startswith(("Thread ", "Current thread ")):
            out.append(line.strip())
            kept = 0
        elif line.strip().startswith("File ") and kept < FRAMES:
            kept += 1
            name, _, rest = line.strip()[6:].partition('", ')
            out.append(f"  {Path(name).name} {rest}")
    return out
