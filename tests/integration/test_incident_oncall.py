"""#15 part 1, "What on-call misses": each item driven through the real `postbox` command against the
stack. Most run `postbox.cli.main()` in this process (its argv, its exit code, its stdout/stderr: the
console script's own function, without an interpreter start per call); the terminal-safety test runs
the real process so its stdout is a real pipe.

Records are made with kafka-python (tests.support.independent), not with postbox's own producer.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from confluent_kafka import Consumer

from tests.integration.incident_support import run_cli
from tests.support.consumers import commit_offset, committed, create_topic, router_headers
from tests.support.independent import produce_independently

#: Bytes that act on a terminal: OSC retitle (ESC ] ... BEL), clear screen (ESC [2J), C1 CSI, bidi override.
HOSTILE = b"\x1b]0;pwned\x07\x1b[2J"
RAW_CONTROLS = ("\x1b", "\x07", "\x9b", "\u202e")


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `postbox ARGS` through the console script's main().

    An exception escaping main() fails the test: that is the traceback a user would see."""
    from postbox.cli import main

    capsys.readouterr()
    with mock.patch.object(sys, "argv", ["postbox", *args]):
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    out, err = capsys.readouterr()
    return code, out, err


def events(topic_agg: str, n: int, partition: int, *, start: int = 0, prefix: str = "e") -> list[Any]:
    return [(f"k{partition}".encode(), json.dumps({"seq": start + i}).encode(),
             router_headers(f"{prefix}-{partition}-{start + i}", "Counted", topic_agg), partition) for i in range(n)]


@pytest.fixture
def timeline(settings: Any, unique: str) -> dict[str, Any]:
    """3 partitions × 3 records, then a boundary time, then 3 × 2 records after it."""
    agg = f"onc{unique}"
    topic = f"outbox.event.{agg}"
    create_topic(settings.kafka_bootstrap, topic, 3)
    produce_independently(settings.kafka_bootstrap, topic, [r for p in range(3) for r in events(agg, 3, p)])
    time.sleep(1.2)
    boundary = datetime.now(timezone.utc)
    time.sleep(1.2)
    produce_independently(settings.kafka_bootstrap, topic, [r for p in range(3) for r in events(agg, 2, p, start=3)])
    return {"topic": topic, "agg": agg, "boundary": boundary.isoformat()}


# -- time windows ---------------------------------------------------------------------------------------
def test_tail_until_offset_time_and_last_n_per_partition(capsys, timeline):
    """#15.1 Time windows: --until OFFSET / ISO time (kcat -o e@ts), bounded and with --follow;
    last:N is N per partition, and the help says so."""
    topic = timeline["topic"]

    def tail(*args: str) -> list[dict[str, Any]]:
        code, out, err = run(capsys, "tail", topic, "--json", *args)
        assert code == 0, err
        return json.loads(out)["records"]

    assert sorted((r["partition"], r["offset"]) for r in tail("--until", "2")) == [(p, o) for p in range(3) for o in (0, 1)]
    before = tail("--until", timeline["boundary"])
    assert len(before) == 9 and {r["value"]["payload"]["seq"] for r in before} == {0, 1, 2}
    assert {r["value"]["payload"]["seq"] for r in tail("--from", timeline["boundary"])} == {3, 4}
    assert sorted((r["partition"], r["offset"]) for r in tail("--from", "last:1")) == [(0, 4), (1, 4), (2, 4)]
    assert sorted((r["partition"], r["offset"]) for r in tail("--from", "last:1", "--until", "2")) == [(0, 1), (1, 1), (2, 1)]

    code, out, err = run(capsys, "tail", topic, "--follow", "--from", "beginning", "--until", timeline["boundary"], "--json",
                         "--idle-timeout", "20")
    assert code == 0 and len(out.splitlines()) == 9, "--follow stops at --until once every partition passed it"

    code, out, _ = run(capsys, "tail", "--help")
    assert "EACH partition" in out and "--until" in out


# -- output that pipes -------------------------------------------------------------------------------
LISTINGS = [
    ["topics"], ["lag", "{group}"], ["dlq", "list", "--topic", "{topic}"], ["audit", "--limit", "3"],
    ["replay", "--group", "{group}", "--to", "earliest"], ["dlq", "replay", "--topic", "{topic}", "--all"],
]


@pytest.fixture
def dead_letters(settings: Any, unique: str) -> dict[str, Any]:
    """A topic with records, a group that committed part of it, and a DLQ whose error is long."""
    return make_dead_letters(settings, unique)


@pytest.fixture(scope="module")
def read_only_dead_letters(settings: Any) -> dict[str, Any]:
    """The same, made once for the tests that only read it (the edge matrix: ~100 commands)."""
    import uuid

    return make_dead_letters(settings, uuid.uuid4().hex[:10])


def make_dead_letters(settings: Any, unique: str) -> dict[str, Any]:
    agg = f"pipe{unique}"
    topic, group = f"outbox.event.{agg}", f"test-pipe-{unique}"
    create_topic(settings.kafka_bootstrap, topic, 1)
    create_topic(settings.kafka_bootstrap, topic + ".dlq", 1)
    produce_independently(settings.kafka_bootstrap, topic, events(agg, 6, 0))
    commit_offset(settings.kafka_bootstrap, group, topic, 4)
    long_error = "handler failed: " + "x" * 300 + " END"
    headers = router_headers(f"dl-{unique}", "Counted", agg) + [
        ("postbox.error", long_error.encode()), ("postbox.error.class", b"HandlerError:ValueError"),
        ("postbox.group", group.encode()), ("postbox.origin.topic", topic.encode()),
        ("postbox.origin.partition", b"0"), ("postbox.origin.offset", b"5"), ("postbox.attempts", b"1"),
    ]
    produce_independently(settings.kafka_bootstrap, topic + ".dlq", [(b"k0", b'{"seq": 5}', headers, 0)])
    return {"topic": topic, "group": group, "error": long_error, "ref": f"{topic}.dlq:0:0"}


def test_piped_listing_is_tsv_with_full_values(capsys, dead_letters):
    """#15.1 Output that pipes: not a terminal → a TSV header and rows, values whole (the ref pastes
    into `dlq show`, a 300-character error is not cut)."""
    code, out, err = run(capsys, "dlq", "list", "--topic", dead_letters["topic"])
    assert code == 0, err
    header, *rows = out.splitlines()
    assert header.split("\t") == ["ref", "dead-lettered", "event id", "type", "key", "group", "class", "error"]
    (row,) = [r.split("\t") for r in rows]
    assert row[0] == dead_letters["ref"] and row[-1] == dead_letters["error"]
    assert "│" not in out and "…" not in out
    code, out, err = run(capsys, "dlq", "show", row[0], "--json")
    assert code == 0 and json.loads(out)["dead_letters"][0]["error"] == dead_letters["error"]


@pytest.mark.parametrize("template", LISTINGS, ids=lambda a: " ".join(a[:2]))
def test_every_listing_takes_output_table_json_tsv(capsys, read_only_dead_letters, template):
    """#15.1 --output table|json|tsv on every listing command; --json stays an alias of --output json."""
    args = [a.format(**read_only_dead_letters) for a in template]
    as_json = run(capsys, *args, "--output", "json")
    alias = run(capsys, *args, "--json")
    assert as_json[0] == alias[0] and as_json[0] in (0, 1), as_json[2]
    assert set(json.loads(as_json[1])) == set(json.loads(alias[1]))
    code, out, _ = run(capsys, *args, "--output", "tsv")
    assert code == as_json[0] and "\t" in out.splitlines()[0] and "│" not in out
    code, out, _ = run(capsys, *args, "--output", "table")
    assert code == as_json[0] and "┃" in out


# -- safe by default: replay ---------------------------------------------------------------------------
def test_replay_plans_unless_execute_and_round_trips_an_exported_plan(capsys, settings, dead_letters, tmp_path):
    """#15.1 Safe by default: `replay` prints the plan and changes nothing without --execute;
    --shift-by, --to-current, --export FILE and --from-file FILE (kafka-consumer-groups' CSV)."""
    topic, group = dead_letters["topic"], dead_letters["group"]

    def plan(*args: str, expect: int = 0) -> dict[str, Any]:
        code, out, err = run(capsys, "replay", "--group", group, "--json", *args)
        assert code == expect, err
        return json.loads(out)

    rewind = plan("--to", "earliest", "--yes")
    assert rewind["dry_run"] is True and rewind["applied"] is False and rewind["reconsumed"] == 4
    assert committed(settings.kafka_bootstrap, group, topic, 1) == {0: 4}, "a plan changes nothing"
    assert [p["new"] for p in plan("--shift-by", "-3")["partitions"]] == [1]
    assert [p["new"] for p in plan("--to-current")["partitions"]] == [4]
    forward = run(capsys, "replay", "--group", group, "--shift-by", "1")
    assert forward[0] == 1 and "skips 1 record" in forward[2]
    both = run(capsys, "replay", "--group", group, "--to", "earliest", "--shift-by", "-1")
    assert both[0] == 2 and "choose one of" in both[2]

    exported = tmp_path / "plan.csv"
    plan("--shift-by", "-2", "--export", str(exported))
    assert exported.read_text() == f"{topic},0,2\n"
    assert committed(settings.kafka_bootstrap, group, topic, 1) == {0: 4}
    done = plan("--from-file", str(exported), "--execute", "--yes")
    assert done["applied"] is True and done["audit"]["command"] == "replay"
    assert committed(settings.kafka_bootstrap, group, topic, 1) == {0: 2}

    broken = tmp_path / "broken.csv"
    broken.write_text(f"{topic},0,2\n{topic},zero,1\n")
    code, _, err = run(capsys, "replay", "--group", group, "--from-file", str(broken))
    assert code == 1 and f"{broken}:2:" in err and "Traceback" not in err


def test_dlq_replay_checks_the_ttl_published_by_the_groups_reading_the_topic(capsys, dead_letters, redis_client):
    """Without --marker-ttl `dlq replay` checks each dead letter's age against the shortest marker
    TTL published by the groups reading its origin topic (the replayed record reaches all of
    them), not the 8-day default. Found in review: a group keeping its markers for a second saw
    a 2-second-old dead letter planned as "ready", and would have applied the event again."""
    from datetime import timedelta

    from postbox.effects import groups

    topic, group = dead_letters["topic"], dead_letters["group"]  # the group committed offsets on the topic
    groups.publish(redis_client, group, timedelta(seconds=1))
    try:
        time.sleep(2)  # the dead letter's event is now older than the group's markers live
        code, out, err = run(capsys, "dlq", "replay", "--topic", topic, "--all", "--safety-margin", "0s", "--json")
        (item,) = json.loads(out)["items"]
        assert code == 1 and item["status"] == "unsafe", out + err
        assert f"dedupe markers of group {group} live 1 s" in item["reason"]
        code, out, _ = run(capsys, "dlq", "replay", "--topic", topic, "--all", "--safety-margin", "0s", "--json", "--marker-ttl", "8d")
        assert code == 0 and json.loads(out)["items"][0]["status"] == "ready", "--marker-ttl is the operator's word"
    finally:
        groups.unpublish(redis_client, group)


# -- who is consuming -----------------------------------------------------------------------------------
def test_lag_shows_each_member_and_says_when_max_lag_is_exceeded(capsys, settings, dead_letters):
    """#15.1 Who is consuming: client id, host, partitions and group.instance.id per member;
    Say what happened: `lag --max-lag N` says on stderr which group exceeded it."""
    topic, group = dead_letters["topic"], dead_letters["group"] + "-live"
    consumer = Consumer({"bootstrap.servers": settings.kafka_bootstrap, "group.id": group, "client.id": "oncall-client",
                         "group.instance.id": "oncall-static-1", "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "session.timeout.ms": 6000})
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.5)
        assert consumer.assignment(), "the consumer never got its partition"
        code, out, err = run(capsys, "lag", group, "--json")
        assert code == 0, err
        (member,) = json.loads(out)["groups"][0]["consumers"]
        assert member["client_id"] == "oncall-client" and member["instance_id"] == "oncall-static-1" and member["host"]
        assert member["partitions"] == [{"topic": topic, "partition": 0}]
        code, out, _ = run(capsys, "lag", group, "--output", "tsv")
        assert "oncall-client@" in out and "(oncall-static-1)" in out

        code, out, err = run(capsys, "lag", group, "--max-lag", "5")
        assert code == 1 and f"group {group}: lag 6 > --max-lag 5" in err
        code, out, err = run(capsys, "lag", group, "--max-lag", "6")
        assert code == 0 and "alert:" not in err
    finally:
        consumer.close()


# -- terminal safety ------------------------------------------------------------------------------------
def test_hostile_headers_keys_and_values_are_escaped(capsys, settings, unique):
    """#15.1 Terminal safety: a record made by kafka-python with escape sequences in its key, headers,
    event type, payload and dead-letter error prints escaped in tail, dlq list and dlq show (real
    process, stdout a pipe), and tail's [json] tag shows."""
    agg = f"hostile{unique}"
    topic = f"outbox.event.{agg}"
    create_topic(settings.kafka_bootstrap, topic, 1)
    create_topic(settings.kafka_bootstrap, topic + ".dlq", 1)
    value = json.dumps({"note": "a\x1b[2J b", "c1": "\x9b2J", "bidi": "\u202egnp.exe"}, ensure_ascii=False).encode()
    headers = [("id", f"hostile-{unique}".encode()), ("event_type", b"Evil" + HOSTILE), ("aggregate_type", agg.encode()),
               ("x-evil", HOSTILE), ("x-text", b"tab\there\rcr")]
    produce_independently(settings.kafka_bootstrap, topic, [(b"k" + HOSTILE, value, headers, 0)])
    dlq_headers = headers + [("postbox.error", b"boom " + HOSTILE), ("postbox.error.class", b"HandlerError:" + HOSTILE),
                             ("postbox.group", b"g" + HOSTILE), ("postbox.origin.topic", topic.encode()),
                             ("postbox.origin.partition", b"0"), ("postbox.origin.offset", b"0")]
    produce_independently(settings.kafka_bootstrap, topic + ".dlq", [(b"k" + HOSTILE, value, dlq_headers, 0)])

    def here(*args: str) -> Any:  # the other forms in this process (stdout captured, not a terminal)
        code, out, err = run(capsys, *args)
        return mock.Mock(returncode=code, stdout=out, stderr=err)

    outputs = {  # real processes writing into a pipe, as `postbox tail T | less` would
        "tail": run_cli("tail", topic),
        "dlq list": run_cli("dlq", "list", "--topic", topic),
        "dlq show": run_cli("dlq", "show", f"{topic}.dlq:0:0"),
        "tail tsv": here("tail", topic, "--output", "tsv"),
        "dlq list table": here("dlq", "list", "--topic", topic, "--output", "table"),
        "dlq show by id": here("dlq", "show", f"hostile-{unique}", "--topic", topic),
        "trace": here("trace", f"hostile-{unique}", "--topic", topic),
    }
    escaped = r"\x1b]0;pwned\x07\x1b[2J"
    for name, done in outputs.items():
        assert done.returncode == (1 if name == "trace" else 0), f"{name}: {done.stderr}"  # trace: dead-lettered
        for control in RAW_CONTROLS:
            assert control not in done.stdout + done.stderr, f"{name} printed {control!r} raw:\n{done.stdout!r}"
    assert f"Evil{escaped}" in outputs["tail"].stdout and r"\x9b2J" in outputs["tail"].stdout and r"\u202egnp" in outputs["tail"].stdout
    assert "[json] {" in outputs["tail"].stdout, "the encoding tag is shown, not eaten as markup"
    assert r"tab\x09here\x0dcr" in outputs["tail"].stdout
    assert f"boom {escaped}" in outputs["dlq list"].stdout and f"HandlerError:{escaped}" in outputs["dlq list"].stdout
    assert f"boom {escaped}" in outputs["dlq show"].stdout and f"Evil{escaped}" in outputs["dlq show"].stdout
    assert f"key k{escaped}" in outputs["trace"].stdout and f"boom {escaped}" in outputs["trace"].stdout


# -- no tracebacks --------------------------------------------------------------------------------------
EDGE_IDS = ["00000000-0000-7000-8000-000000000000", "ffffffff-ffff-7fff-bfff-ffffffffffff", "00000000-0000-0000-0000-000000000000",
            "", "\x1b[2J"]
EDGE_TIMES = ["0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z", "100000000d", "99999999999999w", "1970-01-01", "-5m"]
EDGE_OFFSETS = ["-1", "0", "99999999999999999999999", "last:99999999999999999999"]
ID_COMMANDS = [["trace", "{x}", "--json"], ["dlq", "show", "{x}"], ["tail", "{topic}", "--event-id", "{x}"],
               ["dlq", "replay", "--event-id", "{x}"]]
TIME_COMMANDS = [["tail", "{topic}", "--from", "{x}"], ["tail", "{topic}", "--until", "{x}"], ["dlq", "list", "--since", "{x}"],
                 ["replay", "--group", "{group}", "--to", "{x}"], ["audit", "--since", "{x}"]]
OFFSET_COMMANDS = [["tail", "{topic}", "--from", "{x}"], ["tail", "{topic}", "--until", "{x}"], ["replay", "--group", "{group}", "--to", "{x}"]]
EDGE_NAMES = ["", "\x1b[2J", "g" * 300, "postbox-outbox?x", "postbox-outbox#x", "../connector-plugins"]
NAME_COMMANDS = [["lag", "{x}"], ["replay", "--group", "{x}", "--to", "earliest"], ["trace", "00000000-0000-7000-8000-000000000000", "--group", "{x}"],
                 ["connector", "status", "--name", "{x}"], ["dlq", "list", "--group", "{x}"], ["tail", "{x}"]]
EDGE_CASES = ([(c, x) for c in ID_COMMANDS for x in EDGE_IDS] + [(c, x) for c in TIME_COMMANDS for x in EDGE_TIMES]
              + [(c, x) for c in OFFSET_COMMANDS for x in EDGE_OFFSETS] + [(c, x) for c in NAME_COMMANDS for x in EDGE_NAMES])


@pytest.mark.parametrize(("template", "edge"), EDGE_CASES, ids=[f"{' '.join(c[:2])}={x!r}" for c, x in EDGE_CASES])
def test_edge_ids_times_and_offsets_never_end_in_a_traceback(capsys, read_only_dead_letters, template, edge):
    """#15.1 No tracebacks: every command fed edge-case ids, times, offsets and names either answers (exit 0)
    or prints one error line (+ its fix) and exits 1, or is a usage error (exit 2)."""
    args = [a.format(x=edge, **read_only_dead_letters) for a in template]
    code, out, err = run(capsys, *args)
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("…")]
    assert code in (0, 1, 2), (code, err)
    assert "Traceback" not in out + err
    if code == 1 and lines:
        assert lines[0].startswith("error:") and len(lines) <= 2, err
    if code == 1 and not lines:  # a problem found (nothing traced, connector not registered): a verdict on stdout
        assert out.strip(), "exit 1 says why"
    if code == 2:
        assert any(line.startswith("Error:") for line in lines), err
    for control in RAW_CONTROLS:
        assert control not in out + err


# -- say what happened ----------------------------------------------------------------------------------
def test_version_and_group_help_lines(capsys):
    """#15.1: `postbox --version`; every command of the dlq and connector groups has a help line."""
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.strip() == f"postbox {importlib.metadata.version('postbox-cdc')}"
    for group, commands in (("dlq", ("list", "show", "replay")), ("connector", ("status", "restart", "apply"))):
        code, out, _ = run(capsys, group, "--help")
        assert code == 0
        for command in commands:
            (line,) = [line for line in out.splitlines() if re.match(rf"\W*{command}\s", line)]
            assert re.search(rf"{command}\s+\w", line), f"`postbox {group} --help`: no help for {command}: {line!r}"


def test_plan_file_path_is_read_not_trusted(capsys, tmp_path: Path, dead_letters):
    """A plan naming a partition the topic does not have is refused with the file named (no reset)."""
    plan = tmp_path / "plan.csv"
    plan.write_text(f"{dead_letters['topic']},7,0\n")
    code, _, err = run(capsys, "replay", "--group", dead_letters["group"], "--from-file", str(plan), "--execute", "--yes")
    assert code == 1 and str(plan) in err and "partition 7" in err


@pytest.mark.parametrize("args", [
    ["db", "retention", "--keep", "soon"], ["db", "retention", "--lock-timeout", "two"], ["db", "init", "--admin-url", ""],
    ["db", "init", "--admin-url", "postgresql://x@127.0.0.1:1/x", "--partition-width", "0d"], ["db", "republish", "--since", "yesterday"],
], ids=lambda a: " ".join(a[1:3]))
def test_db_usage_errors_exit_2(capsys, args, monkeypatch):
    """#15.1 Say what happened: `db` usage errors (a malformed flag, no admin URL) exit 2 naming the
    flag, before anything connects."""
    monkeypatch.delenv("POSTBOX_ADMIN_DATABASE_URL", raising=False)
    code, _, err = run(capsys, *args)
    assert code == 2 and "Invalid value for" in err and "Traceback" not in err, err


def test_db_status_on_an_unreachable_database_is_one_line(capsys):
    """#15.1 No tracebacks: `db status` against a database that does not answer says so (URL
    password redacted) with the fix, exit 1 — it died with a psycopg traceback."""
    code, _, err = run(capsys, "db", "status", "--url", "postgresql://nobody:hunter2@127.0.0.1:1/x")
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 1 and lines[0].startswith("error: cannot read the outbox partitions") and len(lines) == 2, err
    assert "hunter2" not in err and "Traceback" not in err
