"""`postbox doctor`: every precondition of the pipeline, one line each, with the fix when it fails.

Checks are read-only except "scripts loadable", which SCRIPT LOADs the apply script (it only
adds the script to Redis's script cache, as every consumer does at start).
"""

from __future__ import annotations


from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from postbox.errors import PostboxError
from postbox.outbox.deliverable import RULES, database_rules_state
from postbox.pipelines import DEFAULT, Pipeline
from postbox.settings import Settings, redact_url
from postbox.slot import describe as describe_slot, read_slot
from postbox.topics import DLQ_SUFFIX, TOPIC_PREFIX


@dataclass
class Check:
    name: str
    status: str  # ok | warn | fail | skip
    detail: str
    fix: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"check": self.name, "status": self.status, "detail": self.detail, "fix": self.fix}


def run_checks(settings: Settings, connector_name: str | None, kafka_factory: Callable[[], Any],
               pipeline: Pipeline = DEFAULT) -> list[Check]:
    """Every check, of ``pipeline``'s outbox, slot, publication and connector (``connector_name``:
    another name for its connector) and of the Kafka, Redis and schemas every pipeline shares."""
    checks: list[Check] = []
    checks += _postgres(settings, pipeline)
    checks += _connect(settings, connector_name or pipeline.connector, pipeline.flag)
    checks.append(_kafka(kafka_factory))
    checks += _guard("kafka nodes", lambda: _kafka_nodes(kafka_factory))
    checks += _redis(settings)
    checks += _guard("marker TTL", lambda: _marker_ttl(settings, kafka_factory))
    checks.append(_schemas())
    return checks


def _guard(name: str, fn: Callable[[], Check | list[Check]]) -> list[Check]:
    try:
        result = fn()
    except PostboxError as exc:
        return [Check(name, "fail", exc.message, exc.fix)]
    except Exception as exc:  # a check must report, never crash the report
        return [Check(name, "fail", f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}")]
    return result if isinstance(result, list) else [result]


def _postgres(settings: Settings, pipeline: Pipeline) -> list[Check]:
    import psycopg

    try:
        conn = psycopg.connect(settings.database_url, connect_timeout=5, autocommit=True)
    except psycopg.Error as exc:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else "connection failed"
        fix = "start it with `postbox up`, or fix POSTBOX_DATABASE_URL"
        if "does not exist" in text:
            from postbox.conninfo import no_database_hint

            fix = no_database_hint(settings.database_url) or fix
        return [Check("postgres reachable", "fail", text, fix)] + [
            Check(n, "skip", "PostgreSQL unreachable") for n in ("wal_level", "replication slot", "publication")
        ]
    out = [Check("postgres reachable", "ok", f"{conn.info.user}@{conn.info.host}:{conn.info.port}/{conn.info.dbname}")]
    with conn:
        wal = conn.execute("SHOW wal_level").fetchone()[0]
        out.append(Check("wal_level", "ok" if wal == "logical" else "fail", f"wal_level = {wal}",
                         None if wal == "logical" else "ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL"))
        out.append(_slot(conn, pipeline))
        out.append(_deliverable(conn, pipeline))
        out.append(_publication(conn, pipeline))
    return out


def _publication(conn: Any, pipeline: Pipeline) -> Check:
    """The pipeline's publication publishes its outbox's inserts, as the partition root."""
    pub = conn.execute(
        "SELECT p.pubinsert, p.pubviaroot, EXISTS (SELECT 1 FROM pg_publication_tables t WHERE t.pubname = p.pubname"
        " AND t.schemaname = %s AND t.tablename = 'outbox') FROM pg_publication p WHERE p.pubname = %s",
        (pipeline.schema, pipeline.publication),
    ).fetchone()
    if pub is None:
        return Check("publication", "fail", f"publication {pipeline.publication} does not exist in database {conn.info.dbname!r}",
                     f"run `postbox db init{pipeline.flag}`")
    ok = pub[0] and pub[1] and pub[2]
    return Check("publication", "ok" if ok else "fail",
                 f"{pipeline.publication}: inserts {'on' if pub[0] else 'OFF'}, via partition root {'on' if pub[1] else 'OFF'},"
                 f" {pipeline.table} {'included' if pub[2] else 'MISSING'}",
                 None if ok else f"run `postbox db init{pipeline.flag}` (it repairs the publication)")


def _slot(conn: Any, pipeline: Pipeline) -> Check:
    """The slot exists, is read, and its WAL is not about to be (or already) lost."""
    name = pipeline.slot
    slot = read_slot(conn, name)
    line = f"{name}: {describe_slot(slot)}"
    if slot["state"] == "missing":
        return Check("replication slot", "fail", f"slot {name} does not exist",
                     f"register the connector (`postbox connector apply{pipeline.flag}`): Debezium creates the slot; "
                     "if it existed before, events written since may be lost: docs/recovery.md")
    if slot["wal_status"] == "lost":
        return Check("replication slot", "fail", line,
                     "the slot lost WAL it needed: events written since the connector's last position were never "
                     "published; recover with docs/recovery.md (new slot, then `postbox db republish`)")
    if slot["wal_status"] == "unreserved":
        return Check("replication slot", "fail", line + " (past max_slot_wal_keep_size: lost at the next checkpoint)",
                     "get the connector reading now (`postbox connector status`/`restart`), or raise max_slot_wal_keep_size")
    if slot["state"] != "active":
        return Check("replication slot", "warn", line,
                     "no connector task reads the slot: `postbox connector status`, then `postbox connector restart`")
    return Check("replication slot", "ok", line)


def _deliverable(conn: Any, pipeline: Pipeline) -> Check:
    """No outbox row the connector cannot deliver (it would stop every event behind it)."""
    name = "deliverable rows"
    state = database_rules_state(conn, pipeline)
    if state is None:
        return Check(name, "fail", f"{pipeline.table} lacks {RULES}: other writers can insert rows that stop the connector",
                     f"run `postbox db init{pipeline.flag}` (it sets them, idempotently)")
    if state:
        return Check(name, "ok", f"{RULES} validated: every row in {pipeline.table} can be delivered")
    bad = conn.execute(pipeline.sql("SELECT id, aggregate_type, problem FROM {schema}.outbox_undeliverable(20)")).fetchall()
    if not bad:
        return Check(name, "warn", f"{RULES} are NOT VALID, though no row breaks them now",
                     f"run `postbox db init{pipeline.flag}` to validate them")
    listed = "; ".join(f"{i} ({t!r}): {p}" for i, t, p in bad[:5])
    more = f" (and more: {len(bad)} shown of the first 20)" if len(bad) > 5 else ""
    return Check(name, "fail", f"{len(bad)} row(s) the connector cannot deliver: {listed}{more}",
                 "a connector task that reaches one fails on every restart: delete these rows and follow "
                 "docs/recovery.md (skip them in the slot, then republish what is behind them)")


def _connect(settings: Settings, name: str, flag: str = "") -> list[Check]:
    """The connector and its tasks are RUNNING; ``flag``: the fixes' ``--pipeline``."""
    from postbox.connect_client import ConnectClient

    restart = f"`postbox connector restart{flag}`"

    def check() -> list[Check]:
        with ConnectClient(settings.connect_url, timeout=5) as client:
            state = client.status(name)
        if state is None:
            return [Check("connector", "fail", f"connector {name} is not registered at {settings.connect_url}",
                          f"`postbox connector apply{flag}`")]
        out = [Check("connector", "ok" if state.connector_state == "RUNNING" else "fail",
                     f"{name}: {state.connector_state} on {state.worker}",
                     None if state.connector_state == "RUNNING" else restart)]
        if not state.tasks:
            out.append(Check("connector tasks", "fail", "no tasks", restart))
        for task in state.tasks:
            trace = (task.get("trace") or "").strip().splitlines()
            out.append(Check(f"connector task {task['id']}", "ok" if task["state"] == "RUNNING" else "fail",
                             task["state"] + (f": {trace[0]}" if trace else ""),
                             None if task["state"] == "RUNNING" else f"fix the cause above, then {restart}"))
        return out

    return _guard("connector", check)


def _kafka(kafka_factory: Callable[[], Any]) -> Check:
    def check() -> Check:
        kafka = kafka_factory()
        try:
            brokers = kafka.ping()
            topics = [t for t in kafka.topic_names() if t.startswith(TOPIC_PREFIX)]
        finally:
            kafka.close()
        dlqs = [t for t in topics if t.endswith(DLQ_SUFFIX)]
        return Check("kafka reachable", "ok", f"{brokers} broker(s); {len(topics) - len(dlqs)} outbox topic(s), {len(dlqs)} DLQ(s)")

    return _guard("kafka reachable", check)[0]


def _redis(settings: Settings) -> list[Check]:
    import redis

    from postbox.effects import EffectsEngine
    from postbox.effects.durability import check_persistence

    from postbox.redis_client import check_not_cluster_node, connect, login_error

    client = connect(settings.redis_url, socket_connect_timeout=3, socket_timeout=10)
    try:
        try:
            client.ping()
            check_not_cluster_node(client, settings.redis_url)
        except PostboxError as exc:
            return [Check("redis reachable", "fail", exc.message, exc.fix)]
        except (redis.ConnectionError, redis.TimeoutError, redis.RedisClusterException) as exc:
            refused = login_error(exc, settings.redis_url)
            if refused is not None:
                return [Check("redis reachable", "fail", refused.message, refused.fix)]
            return [Check("redis reachable", "fail", f"{redact_url(settings.redis_url)}: {exc}", "start it with `postbox up`, or fix POSTBOX_REDIS_URL"),
                    *(Check(n, "skip", "Redis unreachable") for n in ("redis eviction", "redis persistence", "scripts loadable"))]
        version = client.info("server").get("redis_version", "?")
        out = [Check("redis reachable", "ok", f"{redact_url(settings.redis_url)} (Redis {version})")]
        out += _guard("redis nodes", lambda: _redis_nodes(client, settings.redis_url))
        out += _guard("redis eviction", lambda: _eviction(client))
        verdict = check_persistence(client)
        out.append(Check("redis persistence", "ok" if verdict.durable else "warn", f"{verdict.method}: {verdict.reason}",
                         None if verdict.durable else "CONFIG SET appendonly yes; CONFIG SET appendfsync always (and persist it in redis.conf)"))

        def load() -> Check:
            engine = EffectsEngine(client, group="postbox-doctor")
            sha = engine.load(publish=False)  # a check, not a consumer: no group registry entry
            return Check("scripts loadable", "ok", f"apply_effects.lua + {len(engine.script.functions)} effect function(s): sha {sha[:12]}")

        out += _guard("scripts loadable", load)
        return out
    finally:
        client.close()


def _kafka_nodes(kafka_factory: Callable[[], Any]) -> Check:
    """Every broker, the controller, and which brokers the outbox partitions miss in their ISR."""
    from postbox.incident.doctor_nodes import kafka_nodes

    kafka = kafka_factory()
    try:
        md = kafka.metadata(refresh=True)
    finally:
        kafka.close()
    brokers = {b.id: f"{b.host}:{b.port}" for b in md.brokers.values()}
    partitions = {name: [(p.replicas, p.isrs) for p in topic.partitions.values()]
                  for name, topic in md.topics.items() if name.startswith(TOPIC_PREFIX)}
    verdict = kafka_nodes(brokers, getattr(md, "controller_id", None), partitions)
    return Check("kafka nodes", verdict.status, verdict.detail, verdict.fix)


def _redis_nodes(client: Any, url: str) -> list[Check]:
    """The primary's replicas (``INFO replication``) and, through Sentinels, what each Sentinel names."""
    from postbox.incident.doctor_nodes import redis_replication
    from postbox.redis_client import is_cluster_url, is_sentinel_url

    if is_cluster_url(url):
        return [Check("redis nodes", "skip", "a cluster: `redis-cli --cluster check <node>` lists every master and replica")]
    replication = redis_replication(client.info("replication"), redact_url(url))
    out = [Check("redis nodes", replication.status, replication.detail, replication.fix)]
    if is_sentinel_url(url):
        out.append(_sentinels(url))
    return out


def _sentinels(url: str) -> Check:
    import redis

    from postbox.incident.doctor_nodes import sentinel_view
    from postbox.redis_client import sentinel_clients

    clients, service = sentinel_clients(url, socket_connect_timeout=2, socket_timeout=3)
    answers: dict[str, tuple[str, int] | None] = {}
    replicas: list[dict[str, Any]] = []
    for name, sentinel in clients:
        try:
            found = sentinel.sentinel_get_master_addr_by_name(service)
            answers[name] = (_text(found[0]), int(found[1])) if found else None
            if not replicas:
                replicas = [{"ip": _text(r.get("ip")), "port": r.get("port"), "flags": _flags(r.get("flags"))}
                            for r in sentinel.sentinel_slaves(service)]
        except redis.RedisError:
            answers[name] = None
        finally:
            sentinel.close()
    verdict = sentinel_view(answers, replicas, service)
    return Check("redis sentinels", verdict.status, verdict.detail, verdict.fix)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _flags(value: Any) -> str:
    """Sentinel's flags as ``a,b`` whether redis-py parsed them into a set or left the string."""
    if isinstance(value, (set, frozenset, list, tuple)):
        return ",".join(sorted(_text(v) for v in value))
    return _text(value or "")


def _eviction(client: Any) -> Check:
    """A policy that can evict loses dedupe markers without any crash: the consumer refuses it."""
    from postbox.effects import eviction

    found = eviction.policies(client)
    bad = [p for p in found if p.evicts]
    if bad:
        return Check("redis eviction", "fail", "; ".join(p.describe() for p in bad), eviction.FIX)
    return Check("redis eviction", "ok", "; ".join(p.describe() for p in found))


def _marker_ttl(settings: Settings, kafka_factory: Callable[[], Any]) -> list[Check]:
    """Every group's marker TTL outlives the time Kafka can bring its records back."""
    from postbox.incident.marker_ttl import check_groups
    from postbox.redis_client import connect

    client = connect(settings.redis_url, socket_connect_timeout=3, socket_timeout=10)  # a Sentinel or Cluster URL too
    kafka = kafka_factory()
    try:
        verdicts = check_groups(kafka, client)
    finally:
        kafka.close()
        client.close()
    if not verdicts:
        return [Check("marker TTL", "ok", "no consumer group has published its marker TTL yet (a consumer does at start)")]
    return [Check(f"marker TTL {v.group}", v.status, v.detail, v.fix) for v in verdicts]


def _schemas() -> Check:
    def check() -> Check:
        from postbox.resources import schemas_dir
        from postbox.schemas.compat import check_folder

        report = check_folder(schemas_dir())
        if report.ok:
            return Check("schemas compatible", "ok", f"{len(report.schemas)} schema(s) in {report.directory}: all compatible")
        return Check("schemas compatible", "fail", f"{len(report.problems)} problem(s): {report.problems[0]}",
                     "`postbox schemas check` shows them all")

    return _guard("schemas compatible", check)[0]
