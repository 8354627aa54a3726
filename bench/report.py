"""Regenerate BENCHMARKS.md from fresh runs of every benchmark.

    python bench/report.py [--quick] [--only writer,effects,consumer,e2e] [--output BENCHMARKS.md]

Runs ``bench/writer.py``, ``bench/effects.py``, ``bench/consumer.py`` and ``bench/e2e.py`` one after
the other (``--quick`` is passed on), against the stack the POSTBOX_* settings point at, keeps each
one's printed tables and its last line (one JSON object), and writes them with the machine, the
versions of every component and the exact commands.

The generated text sits between two marker comments; everything outside them (for example a
``## Faults`` section another suite appends) is kept as it is. A file without the markers keeps
all of its content after the generated block. With ``--only``, only the named benchmarks'
sections are replaced (each section says when it ran and at what load); the other sections and
the header stay as they were, so one benchmark can be re-run without losing the others' figures.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BEGIN = "<!-- bench/report.py: generated section begins; edits inside are overwritten -->"
END = "<!-- bench/report.py: generated section ends -->"
BENCHES = ("writer", "effects", "consumer", "e2e")
ABOUT = {
    "writer": "what an emit costs a business transaction (pipeline mode, retention policies), batch emit",
    "effects": "the Redis effects engine alone: events/s applied with dedupe, batch sizes",
    "consumer": "the consumer runtime against a raw Kafka read, the effects engine alone, a hand-tuned peer and a naive consumer, one pre-filled topic",
    "e2e": "the whole pipeline, commit to Redis acknowledgement: CDC (Debezium) vs a polling publisher",
}


def run_bench(name: str, quick: bool, timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, f"bench/{name}.py"] + (["--quick"] if quick else [])
    when = {"started": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "load": " ".join(f"{x:.2f}" for x in os.getloadavg())}
    print(f"report: running {' '.join(cmd[1:])} …", file=sys.stderr, flush=True)
    started = time.monotonic()
    try:
        # stdout is collected (tables + the JSON line); stderr (progress) goes straight through.
        proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        return {**when, "name": name, "command": "python " + " ".join(cmd[1:]), "ok": False, "seconds": timeout,
                "error": f"timed out after {timeout:.0f} s", "output": (exc.stdout or "") if isinstance(exc.stdout, str) else ""}
    lines = proc.stdout.rstrip().splitlines()
    figures: dict[str, Any] | None = None
    if lines:
        try:
            figures = json.loads(lines[-1])
            lines = lines[:-1]
        except json.JSONDecodeError:
            figures = None
    ok = proc.returncode == 0 and figures is not None
    error = None if ok else f"exit code {proc.returncode}" + ("" if figures is not None else ", no JSON line") + " (its stderr is above)"
    print(f"report: {name} {'done' if ok else 'FAILED: ' + str(error)} in {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    return {**when, "name": name, "command": "python " + " ".join(cmd[1:]), "ok": ok, "seconds": round(time.monotonic() - started),
            "figures": figures, "output": "\n".join(lines).strip(), "error": error}


# -- machine and versions ------------------------------------------------------------------------


def machine() -> dict[str, str]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = "unknown"
    try:
        kb = int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1))  # type: ignore[union-attr]
        mem = f"{kb / 1024 / 1024:.1f} GiB"
    except (OSError, AttributeError):
        pass
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return {"nproc": str(os.cpu_count()), "memory": mem, "cpu": cpu, "kernel": platform.release(), "load_at_start": load}


def _pom(pom: str, prop: str) -> str:
    try:
        tree = ET.parse(ROOT / "infra" / "maven" / pom / "pom.xml")
        node = tree.getroot().find(f"m:properties/m:{prop}", {"m": "http://maven.apache.org/POM/4.0.0"})
        return node.text.strip() if node is not None and node.text else "?"
    except (OSError, ET.ParseError):
        return "?"


def _interpreter() -> str:
    """The Python version and which interpreter ran the benchmarks: the same code ran ~25 % faster
    per event on Debian's /usr/bin/python3 than on a default pyenv build of 3.11 on one machine
    (Dec 2026), so figures from different interpreters do not compare."""
    build = platform.python_build()[1]  # the build date tells a distribution's build from a pyenv one, without a path
    return f"{platform.python_version()} ({platform.python_implementation()}, built {build}, {platform.python_compiler()})"


def versions() -> dict[str, str]:
    from postbox.settings import Settings
    from postbox.stack.addresses import local_stack_env

    out: dict[str, str] = {"python": _interpreter()}
    settings = Settings.load(local=local_stack_env())
    try:
        import psycopg

        from postbox.stack.stack import admin_database_url

        with psycopg.connect(admin_database_url(), connect_timeout=5) as conn:
            out["postgresql"] = conn.execute("SHOW server_version").fetchone()[0]
    except Exception as exc:  # noqa: BLE001 - the report still lists what it could read
        out["postgresql"] = f"? ({type(exc).__name__})"
    try:
        import redis

        client = redis.Redis.from_url(settings.redis_url, socket_timeout=5)
        out["redis"] = client.info("server")["redis_version"]
        client.close()
    except Exception as exc:  # noqa: BLE001
        out["redis"] = f"? ({type(exc).__name__})"
    out["kafka (broker and Connect jars)"] = _pom("kafka", "kafka.version")
    out["debezium"] = _pom("debezium", "debezium.version")
    try:
        import httpx

        plugins = httpx.get(settings.connect_url.rstrip("/") + "/connector-plugins", timeout=5).json()
        for p in plugins:
            if p.get("class", "").endswith("PostgresConnector"):
                out["debezium (running connector)"] = p.get("version", "?")
        out["kafka connect (running worker)"] = httpx.get(settings.connect_url, timeout=5).json().get("version", "?")
    except Exception:  # noqa: BLE001
        pass
    import confluent_kafka
    import fastavro
    import psycopg
    import redis as redis_py

    ck = confluent_kafka.version()
    out["confluent-kafka / librdkafka"] = f"{ck[0] if isinstance(ck, tuple) else ck} / {confluent_kafka.libversion()[0]}"
    out["psycopg"] = psycopg.__version__
    out["redis-py"] = redis_py.__version__
    out["fastavro"] = fastavro.__version__
    return out


def settings_in_effect() -> dict[str, str]:
    """The latency-relevant settings of the connector and the local stack, as committed."""
    config = json.loads((ROOT / "connectors" / "outbox.json").read_text())["config"]
    out = {k: config[k] for k in ("poll.interval.ms", "max.batch.size", "max.queue.size", "producer.override.linger.ms") if k in config}
    for key in [k for k in config if k.startswith("producer.override.") or k.startswith("consumer.override.")]:
        out[key] = config[key]
    from postbox.consumer.config import ConsumerConfig

    out["consumer batch_size / batch_wait_ms"] = f"{ConsumerConfig.batch_size} / {ConsumerConfig.batch_wait_ms}"
    conf = (ROOT / "infra" / "local" / "postgresql.conf").read_text()
    for key in ("synchronous_commit", "wal_writer_delay"):
        m = re.search(rf"^{key}\s*=\s*(\S+)", conf, re.M)
        out[f"postgresql {key}"] = m.group(1) if m else "(server default)"
    return out


# -- rendering -----------------------------------------------------------------------------------


def _f(v: Any, digits: int = 0) -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "**no**"
    if isinstance(v, (int, float)):
        return f"{v:,.{digits}f}"
    return str(v)


def e2e_tables(f: dict[str, Any]) -> list[str]:
    out: list[str] = []
    found = [m for k in f for m in [re.match(r"^([a-z0-9]+?)_p99_ms_at_(\d+)$", k)] if m]
    rates = sorted({int(m.group(2)) for m in found})
    labels = sorted({m.group(1) for m in found}, key=lambda x: (x != "cdc", x != "polling", x))
    out.append("| path | rate/s | p50 ms | p95 ms | p99 ms | max ms | p99 from created_at | throughput/s | max consumer lag | max slot lag | max unpublished rows | sustainable |")
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for rate in rates:
        for path in labels:
            s = f"_at_{rate}"
            if f"{path}_p99_ms{s}" not in f:
                continue
            slot = f.get(f"{path}_max_slot_lag_bytes{s}")
            out.append(
                f"| {path} | {rate:,} | {_f(f.get(f'{path}_p50_ms{s}'), 1)} | {_f(f.get(f'{path}_p95_ms{s}'), 1)} | "
                f"**{_f(f.get(f'{path}_p99_ms{s}'), 1)}** | {_f(f.get(f'{path}_max_ms{s}'), 1)} | {_f(f.get(f'{path}_p99_from_created_ms{s}'), 1)} | "
                f"{_f(f.get(f'{path}_throughput{s}'))} | {_f(f.get(f'{path}_max_consumer_lag{s}'))} | "
                f"{_f(slot / 1024, 0) + ' KiB' if slot is not None else '–'} | {_f(f.get(f'{path}_max_unpublished{s}'))} | "
                f"{_f(f.get(f'{path}_sustainable{s}'))} |")
        for path in labels:
            ratio = f.get(f"{path}_vs_cdc_p99_at_{rate}")
            if ratio is not None:
                out.append(f"| *p99 {path} / cdc* | {rate:,} | | | *{ratio:.2f}×* | | | | | | | |")
    out.append("")
    if "cdc_max_rate" in f or "polling_max_rate" in f:
        out.append("| path | highest sustainable rate | probes (rate: sustainable?, p99) |")
        out.append("|---|---:|---|")
        for path in ("cdc", "polling"):
            if f"{path}_max_rate" in f:
                probes = ", ".join(f"{p['rate']:,}: {'yes' if p['sustainable'] else 'no'} ({_f(p['p99_ms'])} ms)" for p in f.get(f"{path}_probes", []))
                bound = " (emitter-bound: lower bound)" if f.get(f"{path}_max_rate_emitter_bound") else ""
                out.append(f"| {path} | **{f[path + '_max_rate']:,}/s**{bound} | {probes or '–'} |")
        out.append("")
    comps = ["postgres", "kafka", "connect", "redis", "consumer", "emitter", "relay", "cpu_stall"]
    out.append("CPU, % of one core over the run (this machine has 2 cores = 200 %; PostgreSQL = postmaster and all children, "
               "other clients' backends included on a shared stack; CPU stall = share of the run during which some runnable task on the "
               "machine waited for a CPU, from /proc/pressure/cpu):")
    out.append("")
    out.append("| path | rate/s | " + " | ".join(c if c != "cpu_stall" else "CPU stall (PSI) %" for c in comps) + " |")
    out.append("|---|---:|" + "---:|" * len(comps))
    for rate in rates:
        for path in labels:
            cpu = f.get(f"{path}_cpu_at_{rate}")
            if cpu:
                out.append(f"| {path} | {rate:,} | " + " | ".join(_f(cpu.get(c), 1) for c in comps) + " |")
    out.append("")
    out.append("PostgreSQL write load per run (the path's outbox tables from pg_stat_user_tables; commits per event count every "
               "transaction in the path's database, the relay's polls included; WAL from pg_current_wal_lsn, cluster-wide, so "
               "other clients of a shared cluster add to it):")
    out.append("")
    out.append("| path | rate/s | rows inserted | rows updated | dead row versions made | (auto)vacuums during the run | commits per event | WAL bytes per event |")
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|")
    for rate in rates:
        for path in labels:
            pg = f.get(f"{path}_pg_at_{rate}")
            if pg:
                out.append(f"| {path} | {rate:,} | {_f(pg.get('rows_inserted'))} | {_f(pg.get('rows_updated'))} | "
                           f"{_f(pg.get('dead_versions_created'))} | {_f(pg.get('vacuums'))} | {_f(pg.get('commits_per_event'), 2)} | "
                           f"{_f(pg.get('wal_bytes_per_event'))} |")
    out.append("")
    out.append("Where the time goes (ms, p50 / p99): COMMIT returned → appended to Kafka (the bench topics use LogAppendTime) → out of the consumer's `consume()` → acknowledged by Redis; last column: the emitting transaction as the application sees it (BEGIN to COMMIT returned, not part of the latency):")
    out.append("")
    out.append("| path | rate/s | commit → Kafka | Kafka → consume() | consume() → ack | the emitting transaction itself |")
    out.append("|---|---:|---:|---:|---:|---:|")
    for rate in rates:
        for path in labels:
            sp = f.get(f"{path}_split_at_{rate}")
            if sp:
                out.append(f"| {path} | {rate:,} | {_f(sp.get('commit_to_kafka_p50'), 1)} / {_f(sp.get('commit_to_kafka_p99'), 1)} | "
                           f"{_f(sp.get('kafka_to_consume_p50'), 1)} / {_f(sp.get('kafka_to_consume_p99'), 1)} | "
                           f"{_f(sp.get('consume_to_ack_p50'), 1)} / {_f(sp.get('consume_to_ack_p99'), 1)} | "
                           f"{_f(sp.get('emit_tx_p50'), 1)} / {_f(sp.get('emit_tx_p99'), 1)} |")
    out.append("")
    return out


def render(results: list[dict[str, Any]], quick: bool, started: datetime, cmdline: str) -> str:
    m, v, s = machine(), versions(), settings_in_effect()
    out = [BEGIN, "", "# Benchmarks", ""]
    out.append(f"Generated by `{cmdline}` on {started.strftime('%Y-%m-%d %H:%M UTC')} "
               f"({'quick runs' if quick else 'full runs'}). Every figure below comes from that one invocation; "
               "comparisons are measured side by side in the same run, because absolute times drift on this "
               "shared machine (other engineers' stacks and tests ran on the same 2 cores). Methods: the docstring "
               "at the top of each `bench/*.py`; tuning and the reasoning behind the defaults: [docs/tuning.md](docs/tuning.md).")
    out += ["", "## Machine and versions", "", "| | |", "|---|---|"]
    out += [f"| {k} | {val} |" for k, val in m.items()]
    out += [f"| {k} | {val} |" for k, val in v.items()]
    out += ["", "Settings in effect (committed defaults):", "", "| setting | value |", "|---|---|"]
    out += [f"| `{k}` | {val} |" for k, val in s.items()]
    out += ["", "## Commands", "", "```sh", "eval \"$(postbox env)\"   # the stack the benches ran against"]
    out += [r["command"] for r in results]
    out += ["```", ""]
    for r in results:
        out += [f"## {r['name']}: {ABOUT[r['name']]}", "",
                f"`{r['command']}` ({r['seconds']} s; run {r['started']}, load average at its start {r['load']})", ""]
        if not r["ok"]:
            out += [f"**This run failed**: {r['error']}", ""]
        f = r.get("figures") or {}
        if r["name"] == "e2e" and f:
            out += e2e_tables(f)
        if r["output"]:
            out += ["Printed by the benchmark:", "", "```text", r["output"], "```", ""]
        if f:
            out += ["<details><summary>its JSON line</summary>", "", "```json", json.dumps(f, indent=1, sort_keys=True), "```", "", "</details>", ""]
    out.append(END)
    return "\n".join(out) + "\n"


def merge(existing: str, generated: str, only: tuple[str, ...] | None = None) -> str:
    """The generated block in place of the previous one; every other line of the file kept.

    ``only`` (a partial run): replace just those benchmarks' sections inside the previous block,
    keeping its header and the other benchmarks' sections.
    """
    if BEGIN in existing and END in existing:
        head, rest = existing.split(BEGIN, 1)
        old_block, tail = rest.split(END, 1)
        if only:
            generated = BEGIN + _replace_sections(old_block, generated, only) + END + "\n"
        return head + generated.rstrip("\n") + tail
    if existing.strip():
        return generated + "\n" + existing.lstrip("\n")
    return generated


_SECTION = re.compile(rf"^## ({'|'.join(BENCHES)}): ", re.M)


def _sections(block: str) -> dict[str, tuple[int, int]]:
    """Where each benchmark's section starts and ends in ``block`` (up to the next one or the end)."""
    found = list(_SECTION.finditer(block))
    ends = [m.start() for m in found[1:]] + [len(block)]
    return {m.group(1): (m.start(), end) for m, end in zip(found, ends)}


def _replace_sections(old_block: str, generated: str, only: tuple[str, ...]) -> str:
    new_block = generated.split(BEGIN, 1)[1].split(END, 1)[0]
    fresh = {name: new_block[a:b] for name, (a, b) in _sections(new_block).items()}
    block = old_block
    for name in only:
        if name not in fresh:
            continue
        where = _sections(block)
        text = fresh[name].rstrip("\n") + "\n\n"
        if name in where:
            a, b = where[name]
            block = block[:a] + text + block[b:]
        else:
            block = block.rstrip("\n") + "\n\n" + text
    return block


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="pass --quick to every benchmark")
    parser.add_argument("--only", default=",".join(BENCHES), help="comma-separated subset (default: all)")
    parser.add_argument("--output", default=str(ROOT / "BENCHMARKS.md"))
    parser.add_argument("--timeout", type=float, default=None, help="seconds per benchmark (default 900; quick 400)")
    args = parser.parse_args()
    names = [n for n in BENCHES if n in args.only.split(",")]
    timeout = args.timeout or (400 if args.quick else 1800)
    started = datetime.now(timezone.utc)
    cmdline = "python bench/report.py" + (" --quick" if args.quick else "") + (f" --only {args.only}" if args.only != ",".join(BENCHES) else "")
    results = [run_bench(n, args.quick, timeout) for n in names]
    text = render(results, args.quick, started, cmdline)
    path = Path(args.output)
    existing = path.read_text() if path.exists() else ""
    partial = tuple(names) if names != list(BENCHES) else None
    path.write_text(merge(existing, text, partial))  # re-read just before writing: another suite may append
    failed = [r["name"] for r in results if not r["ok"]]
    print(f"report: wrote {path}" + (f"; FAILED: {', '.join(failed)}" if failed else ""), file=sys.stderr)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
