"""#15.1 time windows: `postbox replay --group G --to SPEC --until SPEC` plans a window per partition
(dry run) and, with `--execute --app MODULE:APP`, runs it as `postbox consume --from --until`
does. Edge cases of the plan: an end beyond the high watermark (clamped and said), an empty
partition, a time before the earliest retained record, a partition filter, an end before the
start, and the usage errors (exit 2) of a window."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone

import pytest

from tests.integration.incident_support import run_cli
from tests.support.cli import audit_records, invoke_json
from tests.support.consumers import commit_offset, committed, create_topic
from tests.support.independent import produce_events_at

pytestmark = pytest.mark.integration


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@pytest.fixture
def windowed(settings, unique):
    """A topic of 3 partitions: 10 events on p0 and p1 (event i of each at base + i s, offset i),
    none on p2; the group committed offset 4 on p0 only. Returns (topic, group, base_ms, ids by partition)."""
    agg = f"rpw{unique}"
    topic = f"outbox.event.{agg}"
    group = f"test-rpw-{unique}"
    create_topic(settings.kafka_bootstrap, topic, 3)
    base = int(time.time() * 1000) - 3_600_000
    placed = [(p, base + i * 1000) for p in (0, 1) for i in range(10)]
    ids = produce_events_at(settings.kafka_bootstrap, topic, agg, placed)
    commit_offset(settings.kafka_bootstrap, group, topic, 4, 0)
    return agg, topic, group, base, {0: ids[:10], 1: ids[10:]}


def _rows(plan: dict) -> dict[int, dict]:
    return {row["partition"]: row for row in plan["window"]["partitions"]}


def test_dry_run_prints_each_partitions_window_and_says_what_it_adjusted(windowed):
    _, topic, group, base, _ = windowed
    # --force: p1 has no committed offset, so a window from offset 2 would run ahead of the group there
    plan = invoke_json("replay", "--group", group, "--to", "2", "--until", "500", "--force")
    rows = _rows(plan)
    assert plan["dry_run"] is True and plan["window"]["records"] == 16
    assert (rows[0]["start"], rows[0]["end"], rows[0]["records"]) == (2, 10, 8)
    assert rows[0]["notes"] == ["end offset 500 is beyond the high watermark: clamped to 10"]
    assert (rows[2]["start"], rows[2]["end"], rows[2]["records"], rows[2]["notes"]) == (0, 0, 0, ["empty partition"])
    assert plan["consume"] == f"postbox consume MODULE:APP --group {group} --from 2 --until 500"
    assert plan["window"]["problems"] == [f"{topic}[1]: the window starts at offset 2, but the group has no committed offset here; "
                                          "with auto.offset.reset=earliest it begins at the earliest retained offset 0, so offsets 0..1 "
                                          "(2 record(s)) are not applied yet, and the window would apply later events of their aggregates before them"]

    # a time before the earliest retained record starts at it; an end time resolves per partition
    plan = invoke_json("replay", "--group", group, "--to", _iso(base - 86_400_000), "--until", _iso(base + 5000), "--partition", "1")
    rows = _rows(plan)
    assert list(rows) == [1]  # the partition filter
    assert (rows[1]["start"], rows[1]["end"], rows[1]["records"]) == (0, 5, 5)
    assert "at or before the earliest retained record (offset 0)" in rows[1]["notes"][0]

    # --to-current: from the group's committed offsets (p1 has none: from its earliest, said)
    plan = invoke_json("replay", "--group", group, "--to-current", "--until", "2099-01-01T00:00:00Z", "--topic", topic)
    rows = _rows(plan)
    assert (rows[0]["start"], rows[0]["end"]) == (4, 10)
    assert "ends at the high watermark 10" in rows[0]["notes"][0]
    assert rows[1]["start"] == 0 and "no committed offset" in rows[1]["notes"][0]


def test_a_window_older_than_the_markers_is_refused_without_force(windowed):
    _, _, group, _, _ = windowed  # its records are an hour old
    old = ("replay", "--group", group, "--to", "earliest", "--until", "end", "--marker-ttl", "30m", "--safety-margin", "0s")
    refused = run_cli(*old, "--json")
    assert refused.returncode == 1 and "refused to replay the window" in refused.stderr and "dedupe markers live 30 min" in refused.stderr
    assert json.loads(refused.stdout)["refused"] is True
    forced = invoke_json(*old, "--force")
    assert forced["refused"] is False and "events applied before may be applied again" in forced["window"]["problems"][0]


def test_window_usage_errors_exit_2_and_name_the_flag(windowed):
    _, _, group, _, _ = windowed
    swapped = run_cli("replay", "--group", group, "--to", "8", "--until", "3")
    assert swapped.returncode == 2 and "--until (offset 3) is before --to (offset 8)" in swapped.stderr
    shifted = run_cli("replay", "--group", group, "--shift-by", "-2", "--until", "3")
    assert shifted.returncode == 2 and "not --shift-by" in shifted.stderr
    no_app = run_cli("replay", "--group", group, "--to", "2", "--until", "8", "--execute", "--yes")
    assert no_app.returncode == 2 and "--app MODULE:APP" in no_app.stderr
    assert f"postbox consume MODULE:APP --group {group} --from 2 --until 8" in " ".join(no_app.stderr.split())
    from_alone = run_cli("consume", "tests.apps.counting:audited", "--group", group, "--from", "2")
    assert from_alone.returncode == 2 and "--from needs --until" in from_alone.stderr
    until_alone = run_cli("consume", "tests.apps.counting:audited", "--group", group, "--until", "2")
    assert until_alone.returncode == 2 and "--until needs --from" in until_alone.stderr


def test_execute_runs_the_window_through_a_changed_handler_and_audits_it(settings, redis_client, windowed):
    agg, topic, group, _, ids = windowed
    # the first deploy applied offsets 2..4 of both partitions (a bounded consume, no commit)
    # (--force: on p1 it runs ahead of the group, which has applied nothing there; p0 is committed at 4)
    first = run_cli("consume", "tests.apps.counting:audited", "--group", group, "--topics", topic, "--from", "2", "--until", "5", "--force")
    assert first.returncode == 0, first.stderr[-2000:]
    # the replay of offsets 0..7 by a later deploy: 3 duplicates per partition, 5 applied
    done = run_cli("replay", "--group", group, "--to", "earliest", "--until", "8", "--execute", "--yes",
                   "--app", "tests.apps.counting:audited_v2", "--output", "tsv")  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == [
        f"{topic}[0] offsets 0..7: applied 5, duplicate 3, dead-lettered 0",
        f"{topic}[1] offsets 0..7: applied 5, duplicate 3, dead-lettered 0",
        f"{topic}[2] empty window at offset 0: nothing to apply",
    ]
    applied: dict[str, int] = {}
    for i in range(4):
        applied.update({k.decode(): int(v) for k, v in redis_client.hgetall(f"{{{agg}:a{i}}}:applied").items()})
    assert applied == {eid: 1 for p in (0, 1) for eid in ids[p][:8]}
    assert committed(settings.kafka_bootstrap, group, topic, 3) == {0: 4, 1: -1001, 2: -1001}  # never moved
    record = [r for r in audit_records(settings.kafka_bootstrap) if r.get("target") == group][-1]
    assert record["command"] == "replay" and record["count"] == 16 and record["outcome"] == "ok"
    assert record["details"]["window"]["until"] == "offset 8"
    assert [(p["applied"], p["duplicate"]) for p in record["details"]["partitions"]] == [(5, 3), (5, 3), (0, 0)]


def test_a_partition_the_group_already_consumed_past_the_end_has_an_empty_window(windowed):
    """--to-current (--from committed): a partition whose committed offset is already past the
    window's end has nothing left to apply there; that is an empty window said in its note, not
    an error that refuses the other partitions' windows (found by review: `--to-current --until 3`
    with p0 committed at 4 failed with "end resolves to offset 3, before its start at offset 4")."""
    _, topic, group, _, _ = windowed  # p0 committed at 4, p1 and p2 not at all
    plan = invoke_json("replay", "--group", group, "--to-current", "--until", "3", "--topic", topic)
    rows = _rows(plan)
    assert (rows[0]["start"], rows[0]["end"], rows[0]["records"]) == (4, 4, 0)
    assert "already past the window's end" in rows[0]["notes"][-1]
    assert (rows[1]["start"], rows[1]["end"], rows[1]["records"]) == (0, 3, 3)
    assert plan["window"]["records"] == 3


def test_the_marker_check_uses_the_ttl_the_group_published(windowed, redis_client):
    """Without --marker-ttl (or POSTBOX_MARKER_TTL) replay checks a window or a reset against the
    marker TTL the group published at its last start (effects.groups, as doctor reads it), not
    the 8-day default. Found by review: a group running with 30-minute markers got a plan that
    re-read hour-old events without a word, though each of them would be applied again."""
    from datetime import timedelta

    from postbox.effects import groups

    _, _, group, _, _ = windowed  # its records are an hour old
    groups.publish(redis_client, group, timedelta(minutes=30))
    window = run_cli("replay", "--group", group, "--to", "earliest", "--until", "end", "--safety-margin", "0s")
    assert window.returncode == 1 and "dedupe markers live 30 min" in window.stderr, window.stderr
    reset = run_cli("replay", "--group", group, "--to", "earliest", "--safety-margin", "0s", "--json")
    assert reset.returncode == 1 and json.loads(reset.stdout)["refused"] is True, reset.stdout + reset.stderr
