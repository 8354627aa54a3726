"""docker compose cannot run here, so this keeps infra/docker-compose.yml in step with the local
stack: the same versions, ports, connector file, and no secret written into the file; and the
replicated override (infra/docker-compose.replicas.yml, merged with the base file as docker compose
merges it) in step with the local stack's multi-node topology."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from postbox import settings
from tests.support import compose_files

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "infra" / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
CONNECTOR = ROOT / "connectors" / "outbox.json"
POM_NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def _pom_property(pom: str, name: str) -> str:
    tree = ET.parse(ROOT / "infra" / "maven" / pom / "pom.xml")
    value = tree.getroot().find(f"m:properties/m:{name}", POM_NS)
    assert value is not None, f"{pom}/pom.xml has no <{name}>"
    return value.text.strip()


def _host_ports(service: str) -> set[int]:
    return {int(str(p).split(":")[-2]) for p in SERVICES[service].get("ports", [])}


def test_image_versions_match_the_jars_of_the_local_stack():
    kafka_version = _pom_property("kafka", "kafka.version")
    debezium_version = _pom_property("debezium", "debezium.version")
    assert SERVICES["kafka"]["image"] == f"apache/kafka:{kafka_version}"
    assert SERVICES["connect"]["image"] == f"quay.io/debezium/connect:{debezium_version}"


def test_ports_are_the_local_stack_defaults_on_loopback():
    assert _host_ports("postgres") == {settings.LOCAL_PG_PORT}
    assert _host_ports("redis") == {settings.LOCAL_REDIS_PORT}
    assert _host_ports("kafka") == {settings.LOCAL_KAFKA_PORT}
    assert _host_ports("connect") == {settings.LOCAL_CONNECT_PORT}
    for service in SERVICES.values():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{port} is published beyond loopback"


def test_the_same_connector_file_is_registered_and_its_env_placeholders_are_provided():
    setup = " ".join(SERVICES["setup"]["command"])
    assert "postbox connector apply --yes" in setup and "--file" not in setup  # the packaged template
    connector = json.loads(CONNECTOR.read_text())
    placeholders = set(re.findall(r"\$\{env:([A-Z0-9_]+)\}", json.dumps(connector)))
    assert placeholders, "the connector is expected to take its connection from the environment"
    assert placeholders <= set(SERVICES["connect"]["environment"]), "connect lacks env for the connector"


def test_topic_routing_matches_what_consumers_subscribe_to():
    config = json.loads(CONNECTOR.read_text())["config"]
    from postbox.topics import TOPIC_PREFIX  # the prefix every consumer and incident command uses

    assert config["transforms.outbox.route.topic.replacement"] == TOPIC_PREFIX + "${routedByValue}"
    assert config["table.include.list"] == "postbox.outbox"


def test_durability_and_logical_decoding_settings_match():
    assert "wal_level=logical" in SERVICES["postgres"]["command"]
    redis_cmd = SERVICES["redis"]["command"]
    assert redis_cmd[redis_cmd.index("--appendfsync") + 1] == "always"
    local_redis = (ROOT / "infra" / "local" / "redis.conf").read_text()
    assert "appendonly yes" in local_redis


@pytest.mark.parametrize("path", ["infra/docker-compose.yml", "connectors/outbox.json"])
def test_no_password_is_written_into_the_file(path):
    text = (ROOT / path).read_text()
    for match in re.finditer(r"(?i)(password[A-Z_]*)\s*[:=]\s*\"?([^\s\"]+)", text):
        value = match.group(2)
        assert value.startswith("${"), f"{path}: {match.group(1)} has a literal value"


def test_redis_gets_the_same_consumer_acl_as_the_local_stack():
    from postbox.effects.acl import consumer_rules

    redis = SERVICES["redis"]
    assert "--aclfile" in redis["command"]
    assert redis["entrypoint"][-1] == "/postbox-redis/entrypoint.sh"
    rules = [line for line in (ROOT / "infra" / "redis" / "consumer.rules").read_text().splitlines() if not line.startswith("#")]
    assert rules == [" ".join(consumer_rules())], "infra/redis/consumer.rules is out of date (see its header)"
    for var in ("POSTBOX_REDIS_ADMIN_PASSWORD", "POSTBOX_REDIS_CONSUMER_PASSWORD"):
        assert redis["environment"][var].startswith("${"), var


# -- #13.4: the known breaks, each from the image's documented conventions ---------------------------


def test_connect_sets_the_flush_interval_the_debezium_image_reads():
    """The image's entrypoint exports CONNECT_OFFSET_FLUSH_INTERVAL_MS=$OFFSET_FLUSH_INTERVAL_MS
    (default 60000), overwriting a CONNECT_ one; the local stack flushes every second."""
    env = SERVICES["connect"]["environment"]
    assert "CONNECT_OFFSET_FLUSH_INTERVAL_MS" not in env, "the image overwrites it: set OFFSET_FLUSH_INTERVAL_MS"
    local = dict(line.split("=", 1) for line in (ROOT / "infra" / "local" / "connect.properties").read_text().splitlines()
                 if "=" in line and not line.startswith("#"))
    assert str(env["OFFSET_FLUSH_INTERVAL_MS"]) == local["offset.flush.interval.ms"].strip() == "1000"


def test_the_broker_writes_its_logs_into_the_kafkadata_volume():
    kafka = SERVICES["kafka"]
    log_dirs = kafka["environment"]["KAFKA_LOG_DIRS"]
    mounts = {m.split(":")[1]: m.split(":")[0] for m in kafka["volumes"]}
    assert any(log_dirs == target or log_dirs.startswith(target + "/") for target, source in mounts.items() if source == "kafkadata"), \
        f"KAFKA_LOG_DIRS={log_dirs} is outside the kafkadata volume ({mounts})"


def test_redis_drops_root_through_the_image_entrypoint():
    """The official image drops to the redis user only from its docker-entrypoint.sh, and only when
    the command starts with redis-server; our entrypoint must hand over to it, with a readable aclfile."""
    redis = SERVICES["redis"]
    assert redis["command"][0] == "redis-server"
    assert "user" not in redis or redis["user"] not in ("root", "0")
    script = [line.strip() for line in (ROOT / "infra" / "redis" / "entrypoint.sh").read_text().splitlines()
              if line.strip() and not line.strip().startswith("#")]
    assert script[-1] == 'exec docker-entrypoint.sh "$@"'
    aclfile = redis["command"][redis["command"].index("--aclfile") + 1]
    assert f"chown redis:redis {aclfile}" in script


def test_retention_is_scheduled_by_a_service():
    retention = SERVICES["retention"]
    command = " ".join(retention["command"])
    assert "postbox db retention" in command and "while true" in command and "sleep" in command
    assert retention["depends_on"]["setup"]["condition"] == "service_completed_successfully"
    assert retention["restart"] == "unless-stopped"
    url = retention["environment"]["POSTBOX_MAINT_DATABASE_URL"]
    assert url.startswith("postgresql://postbox_maint:${POSTBOX_MAINT_PASSWORD}@postgres:")


def test_postbox_env_compose_prints_what_host_clients_need(tmp_path):
    import shlex
    import subprocess
    import sys

    import redis as redis_py
    from postbox.settings import Settings

    env_file = tmp_path / ".env"
    env_file.write_text((ROOT / "infra" / "compose.env.example").read_text().replace("change-me-redis-consumer", "p@ss:w/rd%"))
    done = subprocess.run([sys.executable, "-m", "postbox", "env", "--compose", "--env-file", str(env_file)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    exported = dict(shlex.split(line.removeprefix("export "))[0].split("=", 1) for line in done.stdout.splitlines() if line.startswith("export "))
    Settings.load(exported)  # every URL is one postbox accepts
    consumer = redis_py.connection.parse_url(exported["POSTBOX_REDIS_URL"])
    assert (consumer["username"], consumer["password"], consumer["port"]) == ("postbox_consumer", "p@ss:w/rd%", settings.LOCAL_REDIS_PORT)
    assert exported["POSTBOX_DATABASE_URL"].startswith(f"postgresql://postbox_app:change-me-app@127.0.0.1:{settings.LOCAL_PG_PORT}/")
    assert exported["POSTBOX_KAFKA_BOOTSTRAP"] == f"127.0.0.1:{settings.LOCAL_KAFKA_PORT}"
    assert exported["POSTBOX_ADMIN_DATABASE_URL"].startswith("postgresql://postgres:change-me-superuser@")
    assert exported["POSTBOX_REDIS_APPENDFSYNC"] == SERVICES["redis"]["command"][SERVICES["redis"]["command"].index("--appendfsync") + 1]


# -- the replicated topology: infra/docker-compose.replicas.yml over the base file -------------------

REPLICAS_FILE = ROOT / "infra" / "docker-compose.replicas.yml"
MERGED = compose_files.merged(ROOT / "infra" / "docker-compose.yml", REPLICAS_FILE)["services"]
LOCAL_TOPOLOGY = (3, 2)  # `postbox up --kafka-nodes 3 --connect-workers 2`


def _kafka_nodes() -> dict[int, tuple[str, dict]]:
    """Node id → (service name, environment) of every Kafka service of the merged topology."""
    nodes = {}
    for name, service in MERGED.items():
        if service.get("image", "").startswith("apache/kafka:"):
            env = service["environment"]
            assert int(env["KAFKA_NODE_ID"]) not in nodes, f"{name} has the node id of {nodes[int(env['KAFKA_NODE_ID'])][0]}"
            nodes[int(env["KAFKA_NODE_ID"])] = (name, env)
    return dict(sorted(nodes.items()))


def _listeners(value: str) -> dict[str, tuple[str, int]]:
    """``NAME://host:port,...`` → name → (host, port)."""
    out = {}
    for item in value.split(","):
        name, _, address = item.partition("://")
        host, _, port = address.rpartition(":")
        out[name] = (host, int(port))
    return out


def _local_node_properties(tmp_path: Path) -> list[dict[str, str]]:
    """Each node's server.properties as the local stack renders it for its 3-node topology."""
    from postbox.stack.layout import StackLayout
    from postbox.stack.nodes import kafka_nodes
    from postbox.stack.ports import StackPorts
    from postbox.stack.topology import Topology

    ports = StackPorts(settings.LOCAL_PG_PORT, settings.LOCAL_REDIS_PORT, settings.LOCAL_KAFKA_PORT,
                       settings.LOCAL_KAFKA_PORT + 1, settings.LOCAL_CONNECT_PORT)
    nodes = kafka_nodes(StackLayout(tmp_path), None, ports, Topology(*LOCAL_TOPOLOGY))
    return [dict(line.split("=", 1) for line in node.render().splitlines() if "=" in line and not line.startswith("#")) for node in nodes]


def _command_flags(command: list[str]) -> dict[str, str]:
    """``redis-server [conf] --name value ...`` → name → value."""
    return {command[i].removeprefix("--"): command[i + 1] for i in range(len(command) - 1) if command[i].startswith("--")}


def test_the_replicated_kafka_is_three_nodes_of_the_pinned_image_that_all_know_every_voter(tmp_path):
    nodes = _kafka_nodes()
    local = _local_node_properties(tmp_path)
    assert list(nodes) == [1, 2, 3] == [int(p["node.id"]) for p in local]
    assert {MERGED[name]["image"] for name, _ in nodes.values()} == {SERVICES["kafka"]["image"]}
    by_id = {node_id: name for node_id, (name, _) in nodes.items()}
    local_voter_ids = [int(v.split("@")[0]) for v in local[0]["controller.quorum.voters"].split(",")]
    for node_id, (name, env) in nodes.items():
        assert env["KAFKA_PROCESS_ROLES"] == local[node_id - 1]["process.roles"] == "broker,controller"
        voters = [v.partition("@") for v in env["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(",")]
        assert [int(v) for v, _, _ in voters] == local_voter_ids, f"{name} does not list every voter"
        for voter_id, _, address in voters:
            voter = by_id[int(voter_id)]
            controller_port = _listeners(nodes[int(voter_id)][1]["KAFKA_LISTENERS"])["CONTROLLER"][1]
            assert address == f"{voter}:{controller_port}", f"{name}: voter {voter_id} is {address}, but it is {voter}:{controller_port}"
    # One cluster: the image formats every empty volume with CLUSTER_ID.
    assert len({env["CLUSTER_ID"] for _, env in nodes.values()}) == 1
    # Each node's data in a volume of its own, not the single-node cluster's.
    data_volumes = [next(v.split(":")[0] for v in MERGED[name]["volumes"] if v.split(":")[1] == env["KAFKA_LOG_DIRS"])
                    for name, env in nodes.values()]
    assert len(set(data_volumes)) == 3 and "kafkadata" not in data_volumes, data_volumes


def test_the_replicated_kafka_replicates_as_the_local_three_node_stack(tmp_path):
    """Every replication setting the local stack renders for Topology(3, 2), on every node."""
    local = _local_node_properties(tmp_path)
    replication = {key for key in local[0] if "replication.factor" in key or "min.isr" in key or "min.insync" in key}
    assert len(replication) >= 7, replication  # offsets, transactions, share coordinator, defaults
    for node_id, (name, env) in _kafka_nodes().items():
        for key in sorted(replication):
            var = "KAFKA_" + key.upper().replace(".", "_")
            assert str(env.get(var)) == local[node_id - 1][key], f"{name}: {var}={env.get(var)}, the local stack renders {key}={local[node_id - 1][key]}"
    from postbox.stack.topology import Topology

    assert (local[0]["default.replication.factor"], local[0]["min.insync.replicas"]) == \
        (str(Topology(*LOCAL_TOPOLOGY).replication_factor), str(Topology(*LOCAL_TOPOLOGY).min_insync_replicas)) == ("3", "2")


def test_the_replicated_kafka_ports_are_the_local_stacks_and_each_is_advertised_where_it_is_published():
    from postbox.stack.ports import NODE_PORT_STEP

    for node_id, (name, env) in _kafka_nodes().items():
        port = settings.LOCAL_KAFKA_PORT + NODE_PORT_STEP * (node_id - 1)
        assert {int(str(p).split(":")[-2]) for p in MERGED[name]["ports"]} == {port}, name
        assert f"127.0.0.1:{port}:{port}" in MERGED[name]["ports"], f"{name}: publish {port} 1:1"
        assert _listeners(env["KAFKA_ADVERTISED_LISTENERS"])["EXTERNAL"] == ("127.0.0.1", port), name
        assert _listeners(env["KAFKA_LISTENERS"])["EXTERNAL"][1] == port, name
        assert _listeners(env["KAFKA_ADVERTISED_LISTENERS"])["INTERNAL"][0] == name, name


def _connect_workers() -> dict[str, dict]:
    return {name: s for name, s in MERGED.items() if s.get("image", "").startswith("quay.io/debezium/connect:")}


def test_the_connect_workers_are_one_group_writing_as_the_local_stacks_workers():
    from postbox.stack.ports import StackPorts

    workers = _connect_workers()
    assert len(workers) == LOCAL_TOPOLOGY[1]
    local = dict(line.split("=", 1) for line in (ROOT / "infra" / "local" / "connect.properties").read_text().splitlines()
                 if "=" in line and not line.startswith("#"))
    producer = {k: v for k, v in local.items() if k.startswith("producer.")}
    assert producer == {"producer.acks": "all", "producer.enable.idempotence": "true"}
    bootstrap = ",".join(f"{name}:{_listeners(env['KAFKA_LISTENERS'])['INTERNAL'][1]}" for name, env in _kafka_nodes().values())
    ports = StackPorts(0, 0, 0, 0, settings.LOCAL_CONNECT_PORT)
    published = set()
    for name, worker in workers.items():
        env = worker["environment"]
        for key, value in producer.items():
            assert str(env.get("CONNECT_" + key.upper().replace(".", "_"))) == value, f"{name}: {key} is not {value}"
        assert env["GROUP_ID"] == local["group.id"] and env["BOOTSTRAP_SERVERS"] == bootstrap, name
        for topic in ("CONFIG", "OFFSET", "STATUS"):
            assert str(env[f"{topic}_STORAGE_REPLICATION_FACTOR"]) == "3", f"{name}: {topic} storage replication"
        assert str(env["CONNECT_SCHEDULED_REBALANCE_MAX_DELAY_MS"]) == local["scheduled.rebalance.max.delay.ms"] == "0"
        assert str(env["OFFSET_FLUSH_INTERVAL_MS"]) == local["offset.flush.interval.ms"]
        connector = set(re.findall(r"\$\{env:([A-Z0-9_]+)\}", CONNECTOR.read_text()))
        assert connector <= set(env), f"{name} may run the task but lacks {connector - set(env)}"
        published |= {int(str(p).split(":")[-2]) for p in worker["ports"]}
    assert published == {ports.connect_worker(w) for w in range(1, LOCAL_TOPOLOGY[1] + 1)} == {8083, 8084}


def _redis_data_nodes() -> dict[str, list[str]]:
    return {name: s["command"] for name, s in MERGED.items()
            if s.get("image", "").startswith("redis:") and s.get("command", [""])[0] == "redis-server" and "--sentinel" not in s["command"]}


def _sentinels() -> dict[str, dict]:
    return {name: s for name, s in MERGED.items() if "--sentinel" in s.get("command", [])}


def test_every_redis_process_shares_one_namespace_whose_ports_are_published_one_to_one():
    """Sentinels hand out the addresses they use themselves: only a port that is the same inside
    and outside, on an address that is the same inside and outside, reaches the host and the other
    Sentinels alike."""
    from postbox.cli.compose_env import REPLICA_SENTINEL_PORTS

    redis_processes = {**_redis_data_nodes(), **{n: s["command"] for n, s in _sentinels().items()}}
    namespaces = {MERGED[name].get("network_mode") for name in redis_processes}
    assert len(namespaces) == 1 and next(iter(namespaces)).startswith("service:"), namespaces
    holder = MERGED[next(iter(namespaces)).removeprefix("service:")]
    published = {}
    for port in holder["ports"]:
        host_ip, host_port, container_port = str(port).split(":")
        assert host_ip == "127.0.0.1" and host_port == container_port, f"{port}: publish on loopback, 1:1"
        published[int(host_port)] = port
    data_ports = {}
    for name, command in _redis_data_nodes().items():
        flags = _command_flags(command)
        assert flags["replica-announce-ip"] == "127.0.0.1", name
        assert flags["port"] == flags["replica-announce-port"], f"{name} announces another port than its own"
        data_ports[name] = int(flags["port"])
    assert data_ports == {"redis": settings.LOCAL_REDIS_PORT, "redis-replica": settings.LOCAL_REDIS_PORT + 1}
    sentinel_ports = sorted(int(s["environment"]["POSTBOX_SENTINEL_PORT"]) for s in _sentinels().values())
    assert sentinel_ports == list(REPLICA_SENTINEL_PORTS) == [26379, 26380, 26381]
    assert set(published) == set(data_ports.values()) | set(sentinel_ports)


def _sentinel_conf_lines() -> list[str]:
    """The lines sentinel-entrypoint.sh writes, its variables left as they are."""
    script = (ROOT / "infra" / "redis" / "sentinel-entrypoint.sh").read_text()
    return [m.group(1) or m.group(2) for m in re.finditer(r"""^\s*(?:echo "([^"]+)"|printf '([^'%]+) %s\\n')""", script, re.M)]


def test_the_sentinels_monitor_the_primary_as_postbox_with_quorum_two_and_announce_their_own_address():
    from postbox.cli.compose_env import SENTINEL_SERVICE

    lines = _sentinel_conf_lines()
    primary_port = _command_flags(MERGED["redis"]["command"])["port"]
    quorum = len(_sentinels()) // 2 + 1
    assert f"sentinel monitor {SENTINEL_SERVICE} 127.0.0.1 {primary_port} {quorum}" in lines, lines
    assert (SENTINEL_SERVICE, quorum) == ("postbox", 2)
    assert {"port $POSTBOX_SENTINEL_PORT", "sentinel announce-ip 127.0.0.1", "sentinel announce-port $POSTBOX_SENTINEL_PORT",
            f"sentinel auth-user {SENTINEL_SERVICE} default", f"sentinel auth-pass {SENTINEL_SERVICE}"} <= set(lines), lines
    for name, sentinel in _sentinels().items():
        assert sentinel["entrypoint"][-1] == "/postbox-redis/sentinel-entrypoint.sh", name
        assert sentinel["command"][:2] == ["redis-server", "/tmp/postbox-sentinel.conf"], name  # redis-server: the image drops root
        assert sentinel["environment"]["POSTBOX_REDIS_ADMIN_PASSWORD"].startswith("${"), name
    assert "conf=/tmp/postbox-sentinel.conf" in (ROOT / "infra" / "redis" / "sentinel-entrypoint.sh").read_text()


def test_every_redis_data_node_is_as_durable_as_the_base_primary_and_logs_in_to_its_primary():
    base = _command_flags(SERVICES["redis"]["command"])
    script = (ROOT / "infra" / "redis" / "entrypoint.sh").read_text()
    for name, command in _redis_data_nodes().items():
        service = MERGED[name]
        flags = _command_flags(command)
        assert {k: flags.get(k) for k in base} == base, f"{name} differs from the base primary's {base}"
        assert (flags["appendfsync"], flags["maxmemory-policy"]) == ("always", "noeviction")
        assert service["entrypoint"][-1] == "/postbox-redis/entrypoint.sh", name
        # Any node may be a replica after a failover: the replication login from the file entrypoint.sh writes.
        assert service["environment"]["POSTBOX_REDIS_REPLICATION"] == "yes", name
        assert command[1] == "/tmp/postbox-replication.conf", name
        for var in ("POSTBOX_REDIS_ADMIN_PASSWORD", "POSTBOX_REDIS_CONSUMER_PASSWORD"):
            assert service["environment"][var].startswith("${"), f"{name}: {var}"
    assert "> /tmp/postbox-replication.conf" in script and 'echo "masteruser default"' in script
    assert "printf 'masterauth %s\\n' \"$(quote \"$POSTBOX_REDIS_ADMIN_PASSWORD\")\"" in script
    assert MERGED["redis-replica"]["environment"]["POSTBOX_REDIS_REPLICA_OF"] == f"127.0.0.1 {settings.LOCAL_REDIS_PORT}"


def test_no_password_is_written_into_the_replicas_file():
    text = REPLICAS_FILE.read_text()
    for match in re.finditer(r"(?i)(password[A-Z_]*)\s*[:=]\s*\"?([^\s\"]+)", text):
        assert match.group(2).startswith("${"), f"{REPLICAS_FILE.name}: {match.group(1)} has a literal value"


def test_postbox_env_compose_replicas_prints_the_replicated_topology(tmp_path):
    import shlex
    import subprocess
    import sys

    from postbox.redis_client import parse_sentinel_url
    from postbox.settings import Settings

    env_file = tmp_path / ".env"
    env_file.write_text((ROOT / "infra" / "compose.env.example").read_text().replace("change-me-redis-consumer", "p@ss:w/rd%"))
    done = subprocess.run([sys.executable, "-m", "postbox", "env", "--compose", "--replicas", "--env-file", str(env_file)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    exported = dict(shlex.split(line.removeprefix("export "))[0].split("=", 1) for line in done.stdout.splitlines() if line.startswith("export "))
    Settings.load(exported)
    advertised = [":".join(map(str, _listeners(env["KAFKA_ADVERTISED_LISTENERS"])["EXTERNAL"])) for _, env in _kafka_nodes().values()]
    assert exported["POSTBOX_KAFKA_BOOTSTRAP"].split(",") == advertised == ["127.0.0.1:9092", "127.0.0.1:9094", "127.0.0.1:9096"]
    parsed = parse_sentinel_url(exported["POSTBOX_REDIS_URL"])
    sentinel_ports = sorted(int(s["environment"]["POSTBOX_SENTINEL_PORT"]) for s in _sentinels().values())
    assert list(parsed.sentinels) == [("127.0.0.1", port) for port in sentinel_ports]
    assert f"sentinel monitor {parsed.service} " in "\n".join(_sentinel_conf_lines())
    consumer = _url_parts(parsed.single_node_url)
    assert (consumer["username"], consumer["password"]) == ("postbox_consumer", "p@ss:w/rd%")
    assert parsed.sentinel_options == {}  # the Sentinels ask for no login (see sentinel-entrypoint.sh)
    connect_port = int(exported["POSTBOX_CONNECT_URL"].rsplit(":", 1)[1])
    assert any(int(str(p).split(":")[-2]) == connect_port for w in _connect_workers().values() for p in w["ports"])
    assert exported["POSTBOX_REDIS_APPENDFSYNC"] == "always"


def _url_parts(url: str) -> dict:
    import redis as redis_py

    return redis_py.connection.parse_url(url)


def test_quoted_passwords_in_the_compose_env_file_are_read_as_compose_reads_them(tmp_path):
    """docker compose strips the quotes around a .env value ("…" with \\" and \\\\ escapes, '…' as is)
    and drops an inline comment after an unquoted one: the URLs must carry the password the
    containers got, not the quotes."""
    from postbox.cli.compose_env import compose_env

    env_file = tmp_path / ".env"
    env_file.write_text("\n".join([
        "POSTBOX_APP_PASSWORD=\"app pass\\\"word\"",
        "POSTBOX_REDIS_CONSUMER_PASSWORD='sing#le \"q\"'",
        "POSTBOX_PG_SUPERUSER_PASSWORD=plain # the superuser",
        "POSTBOX_MAINT_PASSWORD=\"a\\\\b\"",
    ]) + "\n")
    found = compose_env(env_file)
    assert found["POSTBOX_DATABASE_URL"].startswith("postgresql://postbox_app:app%20pass%22word@")
    assert found["POSTBOX_REDIS_URL"].startswith("redis://postbox_consumer:sing%23le%20%22q%22@")
    assert found["POSTBOX_ADMIN_DATABASE_URL"].startswith("postgresql://postgres:plain@")
    assert found["POSTBOX_MAINT_DATABASE_URL"].startswith("postgresql://postbox_maint:a%5Cb@")
