"""docker compose cannot run here, so this keeps infra/docker-compose.yml in step with the local
stack: the same versions, ports, connector file, and no secret written into the file."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from postbox import settings

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
