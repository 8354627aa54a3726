"""#13.2 Redis over TLS with an ACL user: Debian's redis-server started with --tls-port by the test.

The consumer and the incident commands get what a user gives them: a ``rediss://`` URL with the
ACL user, its password (percent-encoded: it holds ``@ : / %``) and ``?ssl_ca_certs=`` naming the CA
the test made with openssl. Wrong credentials and a missing CA are configuration errors: the
consumer stops at start-up with exit 1 and the fix, instead of "waiting for Redis" forever.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
import redis

from tests.integration.incident_support import run_cli
from tests.support.consumers import ConsumerProcess, committed, create_topic, json_event, produce, wait_for
from tests.support.kafka import drop_topics
from tests.support.redis_servers import RedisServer, free_port
from tests.support.tls import Certificates, make_certificates

pytestmark = pytest.mark.integration

USER = "postbox_tls"
PASSWORD = "p@ss:w/rd%7e!"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("redis-tls"))


@pytest.fixture(scope="module")
def tls_redis(certs: Certificates) -> Iterator[tuple[RedisServer, int]]:
    tls_port = free_port()
    server = RedisServer(config={
        "tls-port": str(tls_port), "tls-cert-file": str(certs.cert), "tls-key-file": str(certs.key),
        "tls-ca-cert-file": str(certs.ca), "tls-auth-clients": "no",
        "user": f"{USER} on >{PASSWORD} ~* &* +@all",
    }).start()  # fmt: skip
    try:
        yield server, tls_port
    finally:
        server.stop()


def _url(port: int, certs: Certificates, password: str = PASSWORD, *, ca: bool = True) -> str:
    query = f"?ssl_ca_certs={certs.ca}" if ca else ""
    return f"rediss://{USER}:{quote(password, safe='')}@127.0.0.1:{port}/0{query}"


def test_consumer_applies_through_tls_as_an_acl_user(tls_redis, certs, settings, unique: str, tmp_path: Path) -> None:
    server, tls_port = tls_redis
    agg = f"tls{unique}"
    topic, group = f"outbox.event.{agg}", f"test-tls-{unique}"
    create_topic(settings.kafka_bootstrap, topic, 1)
    produce(settings.kafka_bootstrap, topic, [json_event(agg, f"a{i % 2}", "Counted", i) for i in range(4)])
    url = _url(tls_port, certs)
    consumer = ConsumerProcess("tests.apps.counting:app", {"POSTBOX_REDIS_URL": url}, tmp_path / "c.log",
                               ["--group", group, "--topics", topic])  # fmt: skip
    try:
        wait_for(lambda: committed(settings.kafka_bootstrap, group, topic, 1)[0] == 4 or not consumer.alive(), 60, "4 committed")
        assert consumer.terminate() == 0, consumer.output()
    finally:
        consumer.close()
        drop_topics(settings.kafka_bootstrap, topic)
    plain = server.client()  # the plain port, as the default user: the test's own look
    assert [int(x) for x in plain.lrange(f"{{{agg}:a0}}:seq", 0, -1)] == [0, 2]
    assert [int(x) for x in plain.lrange(f"{{{agg}:a1}}:seq", 0, -1)] == [1, 3]
    plain.close()
    doctor = run_cli("doctor", "--json", env={"POSTBOX_REDIS_URL": url})
    checks = {c["check"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert checks["redis reachable"]["status"] == "ok" and USER in checks["redis reachable"]["detail"]
    assert PASSWORD not in doctor.stdout and quote(PASSWORD, safe="") not in doctor.stdout
    assert checks["scripts loadable"]["status"] == "ok"


@pytest.mark.parametrize(
    ("kind", "expected"),
    [("password", "refused the login"), ("ca", "the TLS handshake failed")],
)
def test_wrong_credentials_or_ca_stop_the_consumer_at_start(tls_redis, certs, kind: str, expected: str) -> None:
    _server, tls_port = tls_redis
    url = _url(tls_port, certs, password="not-it" if kind == "password" else PASSWORD, ca=kind != "ca")
    done = run_cli("consume", "tests.apps.counting:app", "--group", f"g-{uuid.uuid4().hex[:6]}",
                   "--topics", "outbox.event.tlsnever", "--redis-url", url, timeout=60)  # fmt: skip
    assert done.returncode == 1, done.stdout[-1500:] + done.stderr[-1500:]
    assert "waiting for Redis" not in done.stderr
    error = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and expected in error[0], done.stderr[-2000:]
    assert "fix:" in done.stderr


def test_the_ca_is_really_checked(tls_redis, certs) -> None:
    """Without the CA the server's certificate is refused: TLS is verified, not merely on."""
    _server, tls_port = tls_redis
    client = redis.Redis.from_url(_url(tls_port, certs, ca=False), socket_connect_timeout=3)
    with pytest.raises(redis.ConnectionError, match="certificate verify failed"):
        client.ping()
    client.close()


def test_credentials_revoked_under_a_running_consumer_stop_it_with_exit_3(tls_redis, certs, settings, unique: str,
                                                                          tmp_path: Path) -> None:  # fmt: skip
    """Mid-stream, a refused login is a configuration error too: exit 3, nothing of the failing
    batch committed (the documented contract), instead of retrying the batch forever."""
    server, tls_port = tls_redis
    user, password = f"rotated_{unique}", "first-pass"
    plain = server.client()
    plain.execute_command("ACL", "SETUSER", user, "on", f">{password}", "~*", "&*", "+@all")
    agg = f"rot{unique}"
    topic, group = f"outbox.event.{agg}", f"test-rot-{unique}"
    create_topic(settings.kafka_bootstrap, topic, 1)
    produce(settings.kafka_bootstrap, topic, [json_event(agg, "a", "Counted", i) for i in range(2)])
    url = f"rediss://{user}:{password}@127.0.0.1:{tls_port}/0?ssl_ca_certs={certs.ca}"
    consumer = ConsumerProcess("tests.apps.counting:app", {"POSTBOX_REDIS_URL": url}, tmp_path / "c.log",
                               ["--group", group, "--topics", topic])  # fmt: skip
    try:
        wait_for(lambda: committed(settings.kafka_bootstrap, group, topic, 1)[0] == 2 or not consumer.alive(), 60, "2 committed")
        plain.execute_command("ACL", "SETUSER", user, "resetpass", ">second-pass")  # rotated without telling the consumer
        plain.execute_command("CLIENT", "KILL", "USER", user)
        produce(settings.kafka_bootstrap, topic, [json_event(agg, "a", "Counted", i) for i in range(2, 4)])
        wait_for(lambda: not consumer.alive(), 60, "the consumer to stop")
        assert consumer.process.returncode == 3, consumer.output()
        assert committed(settings.kafka_bootstrap, group, topic, 1)[0] == 2
    finally:
        consumer.close()
        drop_topics(settings.kafka_bootstrap, topic)
    assert "refused the login" in consumer.log_path.read_text()
    assert [int(x) for x in plain.lrange(f"{{{agg}:a}}:seq", 0, -1)] == [0, 1]
    plain.execute_command("ACL", "DELUSER", user)
    plain.close()
