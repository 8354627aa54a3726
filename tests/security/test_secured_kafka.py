"""#13.2 proof with a real secured broker: SASL/SCRAM-SHA-512 over TLS, through the real commands.

A second broker (tests/support/secured_kafka.py) from the stack's jars, with a CA and a
certificate the test makes with openssl and a SCRAM user written by Kafka's own storage tool.
The commands get nothing but what a user would give them: the broker's SASL_SSL address and a
librdkafka properties file (POSTBOX_KAFKA_CONFIG). Records are written by the test over the
broker's internal plaintext listener, so what is read back through the secured one was not
produced by the code under test.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from postbox.outbox import uuid7
from tests.integration.incident_support import run_cli
from tests.support.consumers import ConsumerProcess, committed, create_topic, json_event, produce, read_all, wait_for
from tests.support.secured_kafka import MECHANISM, USER, SecuredKafka
from tests.support.tls import make_certificates

pytestmark = pytest.mark.integration

WRONG = "not-the-password-7d1f"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredKafka]:
    broker = SecuredKafka(tmp_path_factory.mktemp("secured-kafka"))
    try:
        yield broker.start()
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def client_env(secured: SecuredKafka, tmp_path_factory: pytest.TempPathFactory, settings) -> dict[str, str]:
    """What a user sets: the SASL_SSL listener and a properties file (password with @ : / %)."""
    path = tmp_path_factory.mktemp("client") / "kafka.properties"
    path.write_text(secured.client_properties())
    path.chmod(0o600)
    return {"POSTBOX_KAFKA_BOOTSTRAP": secured.bootstrap, "POSTBOX_KAFKA_CONFIG": str(path),
            "POSTBOX_REDIS_URL": settings.redis_url}  # fmt: skip


def _ok(*args: str, env: dict[str, str]) -> dict:
    done = run_cli(*args, "--json", env=env, timeout=90)
    assert done.returncode == 0, f"postbox {' '.join(args)} → {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    return json.loads(done.stdout)


def test_consume_tail_lag_dlq_replay_and_doctor_work_through_sasl_scram_over_tls(
    secured: SecuredKafka, client_env: dict[str, str], redis_client, unique: str, tmp_path: Path
) -> None:
    agg = f"sec{unique}"
    topic, group = f"outbox.event.{agg}", f"test-sec-{unique}"
    create_topic(secured.internal, topic, 2)
    bad_id = str(uuid7())
    records = [json_event(agg, f"a{i % 3}", "Counted", i) for i in range(6)]
    records.append((b"a0", b"\x00\x01 not json", [("id", bad_id.encode()), ("eventType", b"Counted")], None))
    produce(secured.internal, topic, records)

    def done() -> bool:
        try:  # the new broker's group coordinator may still be loading: NOT_COORDINATOR, ask again
            return sum(max(o, 0) for o in committed(secured.internal, group, topic, 2).values()) == 7
        except Exception:  # noqa: BLE001
            return False

    consumer = ConsumerProcess("tests.apps.counting:app", client_env, tmp_path / "consumer.log", ["--group", group, "--topics", topic])
    try:
        wait_for(done, 90,
                 "6 applied + 1 dead-lettered, committed through SASL_SSL")  # fmt: skip
        lag = _ok("lag", group, env=client_env)
        assert [g["lag"] for g in lag["groups"] if g["group"] == group] == [0]
        assert consumer.terminate() == 0
    finally:
        consumer.close()
    applied = sum(redis_client.llen(f"{{{agg}:a{i}}}:seq") for i in range(3))
    assert applied == 6, consumer.output()

    tail = _ok("tail", topic, env=client_env)
    assert len(tail["records"]) == 7
    replay = _ok("dlq", "replay", "--topic", f"{topic}.dlq", "--all", "--execute", "--yes", env=client_env)
    assert [(i["event_id"], i["error_class"], i["status"]) for i in replay["items"]] == [(bad_id, "DecodeError", "sent")], replay
    back = read_all(secured.internal, topic, expect=8)
    assert [dict(r.headers())["id"].decode() for r in back if dict(r.headers()).get("id") == bad_id.encode()] == [bad_id] * 2

    doctor = run_cli("doctor", "--json", env=client_env, timeout=90)
    checks = {c["check"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert checks["kafka reachable"]["status"] == "ok", checks["kafka reachable"]
    redis_client.delete(*[f"{{{agg}:a{i}}}:{s}" for i in range(3) for s in ("seq", "count")])


@pytest.mark.parametrize("command", [["topics"], ["consume", "tests.apps.counting:app", "--topics", "outbox.event.sec"]],
                         ids=["topics", "consume"])  # fmt: skip
def test_wrong_password_is_a_configuration_error_naming_listener_and_mechanism(
    secured: SecuredKafka, client_env: dict[str, str], command: list[str]
) -> None:
    """Exit 1 with one line, not a hang (the subprocess timeout is the hang guard) nor a retry loop."""
    done = run_cli(*command, "-X", f"sasl.password={WRONG}", env={**client_env, "POSTBOX_GROUP": f"test-sec-{uuid.uuid4().hex[:6]}"},
                   timeout=60)  # fmt: skip
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    error = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1, done.stderr[-3000:]
    for part in (f"Kafka at {secured.bootstrap} refused postbox's login", "security.protocol=SASL_SSL",
                 f"sasl.mechanism={MECHANISM}", f"user {USER}"):  # fmt: skip
        assert part in error[0]
    assert WRONG not in done.stdout + done.stderr


def test_a_certificate_from_another_ca_is_refused_as_a_configuration_error(
    secured: SecuredKafka, client_env: dict[str, str], tmp_path: Path
) -> None:
    """TLS is verified, not merely on: a client trusting another CA fails the handshake, and says so."""
    other_ca = make_certificates(tmp_path / "other-ca").ca
    done = run_cli("lag", "-X", f"ssl.ca.location={other_ca}", env=client_env, timeout=60)
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    error = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and f"Kafka at {secured.bootstrap} refused postbox's login" in error[0], done.stderr[-3000:]
    assert "certificate verify failed" in error[0] or "SSL handshake failed" in error[0]
