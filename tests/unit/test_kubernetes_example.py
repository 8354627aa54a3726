"""infra/kubernetes/consumer.yaml, the example Deployment docs/kubernetes.md explains, is held to
the consumer it runs: its arguments are `postbox consume`'s flags, its probes ask the paths the
health server serves on the port the consumer listens on (on an address the kubelet reaches), its
variables are ones postbox reads, the Redis URL's file is where the Secret is mounted, the
instance id comes from the pod name, and the grace period is longer than the final commit's
retries."""

from __future__ import annotations

from pathlib import Path

import typer.main
import yaml

from postbox.consumer.config import ConsumerConfig, env_name
from postbox.consumer.partitions import FINAL_COMMIT_ATTEMPTS
from postbox.secret_env import FILE_SUFFIX, SECRET_VARIABLES
from postbox.settings import ENV_NAMES

ROOT = Path(__file__).resolve().parents[2]
DEPLOYMENT = yaml.safe_load((ROOT / "infra" / "kubernetes" / "consumer.yaml").read_text())
POD = DEPLOYMENT["spec"]["template"]["spec"]
(CONTAINER,) = POD["containers"]


def _consume_flags() -> set[str]:
    from postbox.cli import consume_cmds

    app = typer.Typer()
    consume_cmds.register(app)
    command = typer.main.get_command(app)
    return {opt for param in command.params for opt in param.opts}


def _flag(name: str) -> str:
    args = CONTAINER["args"]
    return args[args.index(name) + 1]


def _known_variables() -> set[str]:
    import dataclasses

    consumer = {env_name(f.name) for f in dataclasses.fields(ConsumerConfig)}
    return consumer | set(ENV_NAMES.values()) | {v + FILE_SUFFIX for v in SECRET_VARIABLES} | {"POSTBOX_SCHEMAS_DIR", "POSTBOX_LUA_DIR", "POSTBOX_KAFKA_CONFIG"}


def test_it_is_a_deployment_running_postbox_consume_with_real_flags():
    assert DEPLOYMENT["kind"] == "Deployment" and DEPLOYMENT["apiVersion"] == "apps/v1"
    args = CONTAINER["args"]
    assert args[:2] == ["postbox", "consume"]
    assert {a for a in args if a.startswith("-")} <= _consume_flags()
    assert _flag("--metrics-host") == "0.0.0.0" and _flag("--log-format") == "json"


def test_the_probes_ask_the_health_paths_on_the_consumer_s_port():
    (port,) = CONTAINER["ports"]
    assert port["containerPort"] == int(_flag("--metrics-port"))
    assert CONTAINER["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": port["name"]}
    assert CONTAINER["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": port["name"]}
    source = (ROOT / "src" / "postbox" / "consumer" / "health.py").read_text()
    assert '"/healthz"' in source and '"/readyz"' in source


def test_every_variable_is_one_postbox_reads_and_secrets_come_from_the_mounted_file():
    env = {e["name"]: e for e in CONTAINER["env"]}
    assert set(env) <= _known_variables(), set(env) - _known_variables()
    assert env["POSTBOX_INSTANCE_ID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert not any("password" in str(e.get("value", "")).lower() or "@" in str(e.get("value", "")) for e in env.values())
    (mount,) = CONTAINER["volumeMounts"]
    (volume,) = POD["volumes"]
    assert mount["name"] == volume["name"] and mount["readOnly"] is True
    mounted = {f"{mount['mountPath']}/{item['path']}" for item in volume["secret"]["items"]}
    assert env["POSTBOX_REDIS_URL_FILE"]["value"] in mounted


def test_the_grace_period_outlasts_the_final_commit_s_retries():
    from postbox.consumer.backoff import Backoff

    retries = sum(Backoff().ceiling(n) for n in range(1, FINAL_COMMIT_ATTEMPTS + 1))
    assert POD["terminationGracePeriodSeconds"] > 30 + retries


def test_the_docs_page_explains_this_file():
    page = (ROOT / "docs" / "kubernetes.md").read_text()
    assert "infra/kubernetes/consumer.yaml" in page and "terminationGracePeriodSeconds" in page and "POSTBOX_INSTANCE_ID" in page
