"""Two services on one PostgreSQL cluster, each with its own pipeline, for real on the stack.

Each service has its own database, outbox (``postbox_<name>.outbox``), publication, replication
slot and Debezium connector on the stack's Connect, all named by its pipeline. Both deliver to
Kafka and to a consumer; with one connector paused (its slot lagging behind the WAL), the other
service's retention still drops what its own slot confirmed, while the paused one keeps its rows
until its connector has caught up. Before pipelines, every command used the one slot
``postbox_outbox``: a second service's connector could not have a slot of its own, and its
retention judged its rows by the first service's slot (or refused: "does not exist in database").

Service A is set up and kept through the library (``init_database``, ``render_connector``,
``run_retention(pipeline=...)``, ``Outbox(pipeline=...)``), service B through the commands
(``--pipeline``, and ``POSTBOX_PIPELINE`` for its retention), as a user would.

Not disruptive: it makes its own databases, connectors and topics and removes them. A retention
checkpoint's horizon is the cluster-wide oldest running transaction, so a long transaction of a
test beside this one can make a run keep a partition; the test runs retention a few times, as
cron would, and asserts only what no other test can cause (a dropped partition, a kept one).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

import httpx
import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from postbox.connect_client import ConnectClient, ConnectorFile
from postbox.connector import render_connector
from postbox.consumer import App, ConsumerConfig
from postbox.db import init_database
from postbox.outbox import Outbox
from postbox.outbox.retention import RetentionReport, run_retention
from postbox.outbox.uuid7 import uuid7
from postbox.pipelines import Pipeline
from postbox.resources import CONNECTOR_TEMPLATE
from postbox.slot import slot_status
from tests.apps.counting import record
from tests.support.cli import invoke, invoke_json
from tests.support.consumers import ThreadedRuntime, wait_for
from tests.support.kafka import drop_topics, read_until
from tests.support.redis_servers import RedisServer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
KEEP = timedelta(days=2)


@dataclass
class Service:
    """One service: its pipeline, its database and the URLs of its roles there."""

    pipeline: Pipeline
    database: str
    admin: str
    app: str
    maint: str
    aggregate: str
    outbox: Outbox

    @property
    def topic(self) -> str:
        return f"outbox.event.{self.aggregate}"

    def emit(self, *seqs: int, event_id_ms: int | None = None) -> list[str]:
        """Events ``Counted {"seq": n}`` in one transaction of the service's own (app role)."""
        with psycopg.connect(self.app) as conn, conn.transaction():
            return [str(self.outbox.emit(conn, self.aggregate, "a1", "Counted", {"seq": n},
                                         event_id=uuid7(event_id_ms) if event_id_ms else None).id) for n in seqs]

    def slot(self) -> dict:
        return slot_status(self.admin, self.pipeline.slot)

    def partitions(self) -> set[str]:
        with psycopg.connect(self.admin) as conn:
            return {r[0] for r in conn.execute(self.pipeline.sql("SELECT partition FROM {schema}.outbox_partitions"))}


def _in_database(url: str, database: str) -> str:
    """The app role's URL (as POSTBOX_DATABASE_URL has it) for another database of the cluster."""
    return urlsplit(url)._replace(path=f"/{database}").geturl()


def _connect_call(settings, method: str, name: str, path: str) -> None:
    response = httpx.request(method, f"{settings.connect_url.rstrip('/')}/connectors/{name}{path}", timeout=30)
    assert response.status_code < 300, (method, path, response.status_code, response.text)


def _state(client: ConnectClient, name: str) -> tuple[str | None, list[str]]:
    status = client.status(name)
    return (status.connector_state, [t["state"] for t in status.tasks]) if status else (None, [])


def _drop_slot_when_released(admin_url: str, slot: str) -> None:
    """Drop the slot once its (deleted) connector's task has let go of it."""
    deadline = time.monotonic() + 60
    with psycopg.connect(admin_url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute("SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone()
            if row is None:
                return
            if not row[0]:
                try:
                    conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
                    return
                except psycopg.errors.ObjectInUse:
                    pass
            time.sleep(0.5)


@pytest.fixture
def two_services(settings, admin_database_url: str, unique: str) -> Iterator[tuple[Service, Service]]:
    services: list[Service] = []
    client = ConnectClient(settings.connect_url, timeout=30)
    template = ConnectorFile.load(CONNECTOR_TEMPLATE)
    try:
        for tag in ("a", "b"):
            pipeline, database = Pipeline(f"svc{tag}{unique}"), f"pbsvc_{tag}{unique}"
            with psycopg.connect(admin_database_url, autocommit=True) as conn:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
            admin = make_conninfo(admin_database_url, dbname=database)
            services.append(Service(pipeline, database, admin, _in_database(settings.database_url, database),
                                    make_conninfo(admin, user="postbox_maint"), f"p{tag}{unique}",
                                    Outbox(encoding="json", pipeline=pipeline)))
            if tag == "a":
                lines = init_database(admin, app_password=None, cdc_password=None, pipeline=pipeline)
                client.apply(render_connector(template, pipeline, database=database))
            else:
                lines = invoke_json("db", "init", "--admin-url", admin, "--pipeline", pipeline.name)["changes"]
                applied = invoke_json("connector", "apply", "--pipeline", pipeline.name, "--database", database, "--yes")
                assert (applied["name"], applied["outcome"]) == (pipeline.connector, "created"), applied
            assert f"created table {pipeline.table} (partitioned by id range, default partition {pipeline.table}_default)" in lines
            assert f"created publication {pipeline.publication} (inserts only, via partition root)" in lines
        for service in services:
            client.wait_running(service.pipeline.connector, 180)
            wait_for(lambda s=service: s.slot().get("state") == "active", 120, f"{service.pipeline.slot} streamed")
        yield services[0], services[1]
    finally:
        for service in services:
            client.delete(service.pipeline.connector)
        for service in services:
            _drop_slot_when_released(admin_database_url, service.pipeline.slot)
            with psycopg.connect(admin_database_url, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(service.database)))
        drop_topics(settings.kafka_bootstrap, *(s.topic for s in services),
                    *(f"__debezium-heartbeat.{s.pipeline.topic_prefix}" for s in services))
        client.close()


def _ids(records) -> list[str]:
    return [r.event_id for r in records]


def _old_partition(service: Service) -> tuple[str, int]:
    """A partition ten days old holding one event (written by the service, with an id of then)."""
    old_day = datetime.now(UTC) - timedelta(days=10)
    with psycopg.connect(service.admin, autocommit=True) as conn:
        conn.execute("SET ROLE postbox_owner")
        conn.execute(service.pipeline.sql("SELECT {schema}.outbox_ensure_partitions('1 day', '1 day', %s)"), (old_day,))
    old_ms = int(old_day.timestamp() * 1000)
    (event_id,) = service.emit(100, event_id_ms=old_ms)
    with psycopg.connect(service.admin) as conn:
        where = conn.execute(service.pipeline.sql("SELECT tableoid::regclass::text FROM {schema}.outbox WHERE id = %s"),
                             (event_id,)).fetchone()[0]
    return where.removeprefix(f"{service.pipeline.schema}."), old_ms


def _retention_until_dropped(service: Service, partition: str, runs: int = 4) -> list[dict]:
    """Retention of the service's pipeline, as cron runs it, until ``partition`` is gone (A: the
    library; B: `postbox db retention` with POSTBOX_PIPELINE naming the pipeline)."""
    reports: list[dict] = []
    for _ in range(runs):
        if service.aggregate.startswith("pa"):
            report: RetentionReport = run_retention(service.maint, keep=KEEP, pipeline=service.pipeline, confirm_wait=timedelta(seconds=40))
            reports.append(report.as_dict())
        else:
            with pytest.MonkeyPatch.context() as env:
                env.setenv("POSTBOX_PIPELINE", service.pipeline.name)
                reports.append(invoke_json("db", "retention", "--url", service.maint, "--keep", "2d"))
        if f"dropped partition {service.pipeline.schema}.{partition}" in reports[-1]["dropped"]:
            break
    return reports


def _checks(service: Service) -> dict[str, str]:
    """`postbox doctor --pipeline` on the service's database: the status of each check."""
    _, out = invoke("doctor", "--pipeline", service.pipeline.name, "--database-url", service.app, "--json")
    return {c["check"]: (c["status"], c["detail"]) for c in json.loads(out)["checks"]}


def test_two_services_one_cluster_deliver_independently_and_a_paused_one_holds_back_only_its_own_retention(
    settings, two_services: tuple[Service, Service], unique: str,
) -> None:
    a, b = two_services
    assert a.pipeline.slot != b.pipeline.slot and a.pipeline.connector != b.pipeline.connector

    # Both deliver: each service's events reach Kafka through its own connector, and one consumer applies both.
    for service in (a, b):
        sent = service.emit(1, 2)
        records = read_until(settings.kafka_bootstrap, service.topic, lambda rs, ids=sent: set(ids) <= set(_ids(rs)))
        assert set(_ids(records)) == set(sent), service.pipeline.describe()
    checks = _checks(b)
    for name in ("replication slot", "publication", "deliverable rows", "connector"):
        assert checks[name][0] == "ok", (name, checks[name])
    assert checks["replication slot"][1].startswith(f"{b.pipeline.slot}: active") and b.pipeline.table in checks["publication"][1]
    lag = invoke_json("lag", "--pipeline", b.pipeline.name, "--database-url", b.app, "--topic", b.topic)
    assert (lag["slot"]["name"], lag["connector"]["name"], lag["connector"]["state"]) == (b.pipeline.slot, b.pipeline.connector, "RUNNING")
    _, metrics = invoke("exporter", "--once", "--no-groups", "--pipeline", b.pipeline.name, "--database-url", b.app)
    assert f'postbox_slot_state{{slot="{b.pipeline.slot}",state="active"}} 1.0' in metrics, metrics
    assert f'postbox_connector_flowing{{connector="{b.pipeline.connector}"}} 1.0' in metrics, metrics

    app = App(require_schemas=False)
    app.handler(a.aggregate, "Counted")(record)
    app.handler(b.aggregate, "Counted")(record)
    server = RedisServer().start()
    redis = server.client()
    runtime = ThreadedRuntime(app, ConsumerConfig.load(group=f"test-pipelines-{unique}", topics=f"{a.topic},{b.topic}",
                                                       redis_url=server.url, batch_wait_ms=20))
    runtime.start()

    def applied(service: Service) -> list[int]:
        return sorted(int(x) for x in redis.lrange(f"{{{service.aggregate}:a1}}:seq", 0, -1))

    try:
        wait_for(lambda: runtime.ok() and applied(a) == [1, 2] and applied(b) == [1, 2], 90, "both services' events applied")

        # A's connector paused: A's slot falls behind; B keeps delivering.
        _connect_call(settings, "PUT", a.pipeline.connector, "/pause")
        with ConnectClient(settings.connect_url, timeout=30) as client:
            wait_for(lambda: _state(client, a.pipeline.connector) == ("PAUSED", ["PAUSED"]), 60, "A's connector paused")
        behind = a.emit(3)
        a_old, _ = _old_partition(a)
        b_old, _ = _old_partition(b)
        late = b.emit(4)
        records = read_until(settings.kafka_bootstrap, b.topic, lambda rs: set(late) <= set(_ids(rs)))
        assert set(late) <= set(_ids(records)), "B's events stopped while A's connector was paused"
        assert a.slot()["lag_bytes"] > 0, a.slot()

        # B's retention drops its old partition: its own slot confirmed it, A's lag is not B's business.
        reports = _retention_until_dropped(b, b_old)
        assert f"dropped partition {b.pipeline.schema}.{b_old}" in reports[-1]["dropped"], reports
        assert b_old not in b.partitions()
        assert all(r["slot"]["name"] == b.pipeline.slot for r in reports)

        # A's retention keeps its rows: its paused connector has confirmed nothing since.
        held = run_retention(a.maint, keep=KEEP, pipeline=a.pipeline, confirm_wait=timedelta(seconds=3))
        assert held.dropped == [] and a.pipeline.slot in (held.refused or "") and "not yet confirmed" in (held.refused or "")
        assert a_old in a.partitions()
        assert applied(a) == [1, 2]

        # A resumed: what it missed arrives, and then its own retention may drop what it confirmed.
        _connect_call(settings, "PUT", a.pipeline.connector, "/resume")
        wait_for(lambda: runtime.ok() and applied(a) == [1, 2, 3, 100] and applied(b) == [1, 2, 4, 100], 120,
                 "A's missed events and B's later ones applied, each once")
        assert set(behind) <= set(_ids(read_until(settings.kafka_bootstrap, a.topic, lambda rs: set(behind) <= set(_ids(rs)))))
        caught_up = _retention_until_dropped(a, a_old)
        assert f"dropped partition {a.pipeline.schema}.{a_old}" in caught_up[-1]["dropped"], caught_up
        assert runtime.stop() == 0
    finally:
        if runtime.thread.is_alive():
            runtime.runtime.stop()
            runtime.thread.join(30)
        redis.close()
        server.stop()


def test_two_pipelines_side_by_side_in_one_database_keep_apart(admin_database_url: str, settings, unique: str) -> None:
    """Two services in one database: each `db init --pipeline` makes its own schema (outbox,
    partitions, retention bookkeeping, deliverability domains) and publication, again idempotently;
    each writer writes its own table only, and retention of one never touches the other's."""
    database = f"pbsvc_one{unique}"
    with psycopg.connect(admin_database_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    admin = make_conninfo(admin_database_url, dbname=database)
    first, second = Pipeline.parse(None, environ={}), Pipeline(f"side{unique}")
    try:
        for pipeline in (first, second):
            lines = init_database(admin, app_password=None, cdc_password=None, pipeline=pipeline)
            assert f"created publication {pipeline.publication} (inserts only, via partition root)" in lines, lines
        for pipeline in (first, second):
            again = init_database(admin, app_password=None, cdc_password=None, pipeline=pipeline)
            assert not any("created" in line or "granted" in line for line in again), again
        app = _in_database(settings.database_url, database)
        with psycopg.connect(app) as conn, conn.transaction():
            Outbox(encoding="json", pipeline=first).emit(conn, f"one{unique}", "a", "Counted", {"seq": 1})
            for seq in (1, 2):
                Outbox(encoding="json", pipeline=second).emit(conn, f"two{unique}", "a", "Counted", {"seq": seq})
        with psycopg.connect(admin) as conn:
            counts = [conn.execute(sql.SQL("SELECT count(*) FROM {}.outbox").format(sql.Identifier(p.schema))).fetchone()[0]
                      for p in (first, second)]
            publications = dict(conn.execute(
                "SELECT pubname, string_agg(schemaname || '.' || tablename, ',') FROM pg_publication_tables GROUP BY pubname"))
        assert counts == [1, 2]
        assert publications == {first.publication: first.table, second.publication: second.table}
        report = run_retention(make_conninfo(admin, user="postbox_maint"), keep=KEEP, pipeline=second, confirm_wait=timedelta(0))
        assert f"replication slot {second.slot} does not exist" in (report.refused or ""), report  # its own slot, not the other's
        assert report.slot["name"] == second.slot and report.dropped == []
    finally:
        with psycopg.connect(admin_database_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database)))
