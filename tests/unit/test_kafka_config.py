"""#13.2 Kafka client configuration: the properties file, -X, precedence, owned settings, secrets.

The properties reader is checked against the java-properties rules with hypothesis (keys and
values written the way Java's Properties.store escapes them must read back unchanged), and every
command that talks to Kafka is driven through the real CLI with a missing file, a refused owned
setting and a secret that must not be printed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from postbox import kafka_config
from postbox.errors import ConfigError
from postbox.kafka_config import KafkaProperties, build, parse_properties
from postbox.settings import Settings

ENV = {"POSTBOX_DATABASE_URL": "postgresql://u@h/db", "POSTBOX_REDIS_URL": "redis://h:1/0"}


def _store_escape(text: str, *, key: bool) -> str:
    """What java.util.Properties.store writes for a key or value (the escapes readers must undo)."""
    out = []
    for i, ch in enumerate(text):
        if ch == "\\":
            out.append("\\\\")
        elif ch in "\t\n\r\f":
            out.append({"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}[ch])
        elif ch in "=:#!" or (ch == " " and (key or i == 0)):
            out.append("\\" + ch)
        elif not 0x20 <= ord(ch) <= 0x7E:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "".join(out)


keys = st.text(st.characters(min_codepoint=33, max_codepoint=0xFFFF, exclude_categories=("Cs",)), min_size=1, max_size=20)
values = st.text(st.characters(min_codepoint=1, max_codepoint=0xFFFF, exclude_categories=("Cs",)), max_size=40)


@given(st.dictionaries(keys, values, max_size=6), st.sampled_from(["=", ": ", " = ", " "]))
def test_properties_written_like_java_store_read_back_unchanged(entries: dict[str, str], separator: str) -> None:
    lines = ["# written by a test", "! also a comment", ""]
    lines += [f"{_store_escape(k, key=True)}{separator}{_store_escape(v, key=False)}" for k, v in entries.items()]
    parsed = parse_properties("\n".join(lines) + "\n")
    assert {k: v for k, v, _line in parsed} == entries


def test_kcat_style_file_with_continuation_comments_and_lines(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text(
        "# kcat -F file\n"
        "security.protocol=SASL_SSL\n"
        "  sasl.mechanism : SCRAM-SHA-512\n"
        "sasl.username alice\n"
        "ssl.ca.location=/etc/ssl/\\\n"
        "    ca.pem\n"
        "sasl.password=p@ss:w/o%rd=x\n"
    )
    props = KafkaProperties.load(path)
    assert props.values == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice",
        "ssl.ca.location": "/etc/ssl/ca.pem", "sasl.password": "p@ss:w/o%rd=x",
    }  # fmt: skip
    assert props.origin("sasl.username") == f"{path}:4"
    assert props.origin("ssl.ca.location") == f"{path}:5"


def test_precedence_defaults_then_file_then_X_then_owned(tmp_path: Path) -> None:
    path = tmp_path / "c.properties"
    path.write_text("linger.ms=50\nacks=all\nsocket.timeout.ms=1000\n")
    props = KafkaProperties.load(path, ["socket.timeout.ms=2000"])
    role = kafka_config.dead_letter_producer_role(client_id="c", delivery_timeout_ms=15000)
    conf = build("b:1", props, role)
    assert conf["linger.ms"] == "50"          # file over the role's default (2)
    assert conf["socket.timeout.ms"] == "2000"  # -X over the file
    assert conf["acks"] == "all"              # owned, and the file agrees
    assert conf["enable.idempotence"] is True  # owned, set although nobody asked
    assert conf["delivery.timeout.ms"] == 15000  # default kept


@pytest.mark.parametrize(
    ("assignment", "role"),
    [
        ("enable.auto.commit=true", kafka_config.consumer_role(group="g", client_id="c", auto_offset_reset="earliest",
                                                               session_timeout_ms=45000, max_poll_interval_ms=300000)),
        ("group.id=other", kafka_config.consumer_role(group="g", client_id="c", auto_offset_reset="earliest",
                                                      session_timeout_ms=45000, max_poll_interval_ms=300000)),
        ("acks=1", kafka_config.dead_letter_producer_role(client_id="c", delivery_timeout_ms=1000)),
        ("partitioner=consistent_random", kafka_config.writer_role(message_timeout_ms=1000)),
        ("enable.auto.commit=true", kafka_config.reader_role(group="g")),
    ],
)  # fmt: skip
def test_owned_setting_with_another_value_is_refused_naming_where_it_came_from(assignment: str, role: kafka_config.Role) -> None:
    props = KafkaProperties.load(None, [assignment])
    with pytest.raises(ConfigError) as caught:
        build("b:1", props, role)
    key = assignment.partition("=")[0]
    assert caught.value.message.startswith(f"-X: {key}=")
    assert role.name in caught.value.message


def test_same_value_for_an_owned_setting_is_accepted() -> None:
    props = KafkaProperties.load(None, ["enable.auto.commit=False", "acks=ALL"])
    build("b:1", props, kafka_config.reader_role(group="g"))
    build("b:1", props, kafka_config.writer_role(message_timeout_ms=1))


def test_bad_assignment_and_bad_key_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="expected key=value"):
        KafkaProperties.load(None, ["security.protocol"])
    with pytest.raises(ConfigError, match="not a librdkafka property name"):
        KafkaProperties.load(None, ["sasl password=x"])


def test_bootstrap_precedence_flag_over_X_over_env_over_file(tmp_path: Path) -> None:
    path = tmp_path / "c.properties"
    path.write_text("bootstrap.servers=file:1\n")
    env = {**ENV, "POSTBOX_KAFKA_CONFIG": str(path)}
    assert Settings.load(env).kafka_bootstrap == "file:1"
    assert Settings.load({**env, "POSTBOX_KAFKA_BOOTSTRAP": "env:1"}).kafka_bootstrap == "env:1"
    x = Settings.load({**env, "POSTBOX_KAFKA_BOOTSTRAP": "env:1"}, kafka_set=["bootstrap.servers=x:1"])
    assert (x.kafka_bootstrap, x.sources["kafka_bootstrap"]) == ("x:1", "-X")
    flag = Settings.load(env, kafka_set=["bootstrap.servers=x:1"], kafka_bootstrap="flag:1")
    assert flag.kafka_bootstrap == "flag:1"
    with pytest.raises(ConfigError, match="kafka_bootstrap|POSTBOX_KAFKA_BOOTSTRAP"):
        Settings.load(env, kafka_set=["bootstrap.servers=nohostport"])


SECRETS = {"sasl.password": "hunter2-sasl", "ssl.key.password": "hunter2-key", "ssl.keystore.password": "hunter2-store",
           "sasl.oauthbearer.client.secret": "hunter2-oauth", "ssl.key.pem": "-----BEGIN PRIVATE KEY-----hunter2",
           "sasl.jaas.config": 'ScramLoginModule required username="a" password="hunter2-jaas";'}  # fmt: skip


def test_secrets_are_masked_in_repr_describe_and_scrubbed_from_text(tmp_path: Path) -> None:
    path = tmp_path / "c.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in SECRETS.items()) + "sasl.username=alice\n")
    settings = Settings.load({**ENV, "POSTBOX_KAFKA_CONFIG": str(path)})
    shown = repr(settings) + json.dumps(settings.kafka_properties.describe())
    for secret in SECRETS.values():
        assert secret not in shown
    assert "alice" in shown
    assert settings.kafka_properties.scrub("login as alice with hunter2-sasl failed") == "login as alice with *** failed"


def test_login_error_names_listener_mechanism_and_user_without_the_password() -> None:
    props = KafkaProperties.load(None, ["security.protocol=SASL_SSL", "sasl.mechanism=SCRAM-SHA-512",
                                        "sasl.username=alice", "sasl.password=hunter2"])  # fmt: skip
    error = kafka_config.login_error("broker:9094", props, "SASL authentication error: Authentication failed (hunter2)")
    assert "broker:9094" in error.message and "SCRAM-SHA-512" in error.message and "alice" in error.message
    assert "SASL_SSL" in error.message and "hunter2" not in str(error)


# -- every command takes the options (real CLI, subprocesses) -------------------------------------

KAFKA_COMMANDS = [
    ["topics"], ["tail", "outbox.event.x"], ["trace", "0190a4a8-7a0e-7000-8000-000000000000"], ["lag"],
    ["dlq", "list"], ["dlq", "show", "outbox.event.x.dlq:0:0"], ["dlq", "replay", "--topic", "outbox.event.x.dlq", "--all"],
    ["replay", "--group", "g", "--topic", "outbox.event.x", "--to", "earliest"],
    ["connector", "restart"], ["connector", "apply"], ["doctor"], ["audit"],
    ["consume", "consumers.shop.payment:app", "--check"], ["demo", "--orders", "1"], ["env"],
]  # fmt: skip


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run([sys.executable, "-m", "postbox", *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "COLUMNS": "200", **(env or {})})  # fmt: skip


@pytest.fixture(scope="module")
def cli_app() -> Any:
    from postbox.cli import _register, app

    _register([])
    return app


@pytest.mark.parametrize("command", KAFKA_COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_every_kafka_command_reads_the_properties_file_and_X(command: list[str], tmp_path: Path, cli_app: Any,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """In-process (the same typer app `postbox` runs): the command's settings see both options."""
    missing = tmp_path / "nowhere.properties"
    result = CliRunner().invoke(cli_app, [*command, "--kafka-config", str(missing)])
    assert isinstance(result.exception, ConfigError), result.output
    assert f"--kafka-config={missing}: no such file" in result.exception.message
    monkeypatch.setenv("POSTBOX_KAFKA_CONFIG", str(missing))
    result = CliRunner().invoke(cli_app, [*command, "-X", "bootstrap.servers=not-host-port"])
    assert isinstance(result.exception, ConfigError), result.output
    assert f"POSTBOX_KAFKA_CONFIG={missing}: no such file" in result.exception.message
    monkeypatch.delenv("POSTBOX_KAFKA_CONFIG")
    if command[0] != "env":  # env prints the properties, it does not connect
        result = CliRunner().invoke(cli_app, [*command, "-X", "bootstrap.servers=not-host-port"])
        assert isinstance(result.exception, ConfigError), result.output
        assert "'not-host-port' is not host:port" in result.exception.message


def test_X_reaches_the_consumer_and_its_secret_is_not_printed() -> None:
    done = _cli("consume", "consumers.shop.payment:app", "--check",
                "-X", "security.protocol=SASL_SSL", "-X", "sasl.password=hunter2-cli")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "hunter2-cli" not in done.stdout + done.stderr
    shown = json.loads(done.stdout)["config"]["kafka_properties"]["properties"]
    assert shown["security.protocol"] == {"value": "SASL_SSL", "from": "-X"}
    assert shown["sasl.password"]["value"] == "***"
    refused = _cli("consume", "consumers.shop.payment:app", "--check", "-X", "enable.auto.commit=true")
    assert refused.returncode == 1 and "enable.auto.commit" in refused.stderr and "consumer" in refused.stderr


def test_env_lists_the_properties_with_secrets_masked(tmp_path: Path) -> None:
    path = tmp_path / "c.properties"
    path.write_text("security.protocol=SSL\nssl.key.password=hunter2-env\n")
    done = _cli("env", "-X", "sasl.password=hunter2-x", env={"POSTBOX_KAFKA_CONFIG": str(path)})
    assert done.returncode == 0, done.stderr
    assert "hunter2" not in done.stdout
    assert f"export POSTBOX_KAFKA_CONFIG={path}" in done.stdout
    assert "# kafka property ssl.key.password=***" in done.stdout


@given(st.dictionaries(st.from_regex(r"[a-z][a-z0-9.\-_]{0,30}", fullmatch=True), values, max_size=6))
def test_written_properties_read_back_unchanged_and_private(entries: dict[str, str]) -> None:
    """What the demo hands its consumer processes (instead of -X with secrets on their argv)."""
    import tempfile

    props = KafkaProperties.load(None, [f"{k}={v}" for k, v in entries.items()])
    with tempfile.TemporaryDirectory() as folder:
        path = props.write(Path(folder) / "kafka.properties")
        assert path.stat().st_mode & 0o777 == 0o600
        assert KafkaProperties.load(path).values == props.values


@pytest.mark.parametrize("session_ms", [1_000, 6_000, 10_000, 45_000, 60_000, 300_000])
def test_the_consumer_heartbeats_often_enough_to_hand_over_partitions_within_seconds(session_ms: int) -> None:
    """In the classic group protocol a member learns of a rebalance from a heartbeat's answer: when a
    member leaves (a SIGTERM, a deploy), the others take up to one heartbeat interval to rejoin, and
    the leaver's partitions wait that long. Kafka's default is 3 s, at most a third of the session."""
    role = kafka_config.consumer_role(group="g", client_id="c", auto_offset_reset="earliest",
                                      session_timeout_ms=session_ms, max_poll_interval_ms=max(session_ms, 300_000))  # fmt: skip
    heartbeat = role.defaults["heartbeat.interval.ms"]
    assert 500 <= heartbeat <= 3_000
    assert heartbeat <= session_ms // 5 or heartbeat == 500  # short sessions (the fault suite's 6 s) keep their pace
