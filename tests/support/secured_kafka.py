"""A second, secured Kafka broker for the tests: SASL/SCRAM-SHA-512 over TLS, from the stack's jars.

The local stack stays plaintext (every other test and helper uses it); this fixture starts its own
one-node KRaft broker from the same jars with a ``SASL_SSL`` listener for clients and a loopback
``PLAINTEXT`` listener the broker uses to talk to itself. The test makes everything the way an
operator would: a CA and a server certificate with ``openssl`` (tests/support/tls.py), a PKCS#12
keystore, and the SCRAM user written into the cluster's metadata at format time by Kafka's own
``kafka-storage format --add-scram``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from postbox.stack.checkout import infra_dir
from postbox.stack.layout import StackLayout
from postbox.stack.prereqs import find_java
from tests.support.redis_servers import free_port
from tests.support.tls import KEYSTORE_PASSWORD, make_certificates

USER = "postbox-billing"
PASSWORD = "s3cret:with@odd/chars%"
MECHANISM = "SCRAM-SHA-512"


@dataclass
class SecuredKafka:
    """One secured broker; ``bootstrap`` is its SASL_SSL listener, ``internal`` the plaintext one."""

    folder: Path
    port: int = field(default_factory=free_port)
    internal_port: int = field(default_factory=free_port)
    controller_port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    ca: Path | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def internal(self) -> str:
        return f"127.0.0.1:{self.internal_port}"

    def client_properties(self, password: str = PASSWORD) -> str:
        """A librdkafka properties file's text, as a user would write it for this listener."""
        return (
            f"# the secured test listener\nsecurity.protocol=SASL_SSL\nsasl.mechanism={MECHANISM}\n"
            f"sasl.username={USER}\nsasl.password={_escape(password)}\nssl.ca.location={self.ca}\n"
        )

    def start(self) -> "SecuredKafka":
        tls = self.folder / "tls"
        config = self.folder / "server.properties"
        config.write_text(self._server_properties(tls / "server.p12"))
        fmt = subprocess.Popen(  # the storage tool's JVM starts while openssl makes the certificates
            _java("kafka.tools.StorageTool", "format", "-t", "c2VjdXJlZC10ZXN0LWNsdXN0ZXI", "-c", str(config),
                  "--standalone", "--add-scram", f"{MECHANISM}=[name={USER},password={PASSWORD}]"),
            cwd=self.folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        self.ca = make_certificates(tls).ca
        out, _ = fmt.communicate(timeout=180)
        if fmt.returncode != 0:
            raise RuntimeError(f"formatting the secured broker's storage failed: {out.decode(errors='replace')[-1500:]}")
        log = open(self.folder / "broker.log", "wb")
        self.proc = subprocess.Popen(_java("kafka.Kafka", str(config)), cwd=self.folder, stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
        self._wait_ready(180)
        return self

    def _server_properties(self, keystore: Path) -> str:
        return "\n".join([
            "process.roles=broker,controller", "node.id=1",
            f"controller.quorum.bootstrap.servers=127.0.0.1:{self.controller_port}",
            f"listeners=SASL_SSL://127.0.0.1:{self.port},INTERNAL://127.0.0.1:{self.internal_port},"
            f"CONTROLLER://127.0.0.1:{self.controller_port}",
            f"advertised.listeners=SASL_SSL://127.0.0.1:{self.port},INTERNAL://127.0.0.1:{self.internal_port}",
            "listener.security.protocol.map=SASL_SSL:SASL_SSL,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "controller.listener.names=CONTROLLER", "inter.broker.listener.name=INTERNAL",
            f"sasl.enabled.mechanisms={MECHANISM}",
            f"listener.name.sasl_ssl.{MECHANISM.lower()}.sasl.jaas.config="
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            "ssl.keystore.type=PKCS12", f"ssl.keystore.location={keystore}",
            f"ssl.keystore.password={KEYSTORE_PASSWORD}", f"ssl.key.password={KEYSTORE_PASSWORD}",
            f"log.dirs={self.folder / 'data'}",
            # one partition for the internal topics: a fresh broker loads its group coordinator at once
            "offsets.topic.num.partitions=1", "transaction.state.log.num.partitions=1",
            "offsets.topic.replication.factor=1", "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1", "share.coordinator.state.topic.replication.factor=1",
            "share.coordinator.state.topic.min.isr=1", "default.replication.factor=1", "min.insync.replicas=1",
            "num.partitions=1", "group.initial.rebalance.delay.ms=0", "num.network.threads=1", "num.io.threads=2",
            "",
        ])  # fmt: skip

    def _wait_ready(self, timeout: float) -> None:
        """Until the broker answers metadata on its internal listener (the SASL_SSL one shares it)."""
        import logging

        from confluent_kafka.admin import AdminClient

        quiet = logging.getLogger("tests.secured_kafka.librdkafka")
        quiet.addHandler(logging.NullHandler())
        quiet.propagate = False
        deadline = time.monotonic() + timeout
        admin = AdminClient({"bootstrap.servers": self.internal, "logger": quiet})
        try:
            while time.monotonic() < deadline:
                assert self.proc is not None
                if self.proc.poll() is not None:
                    raise RuntimeError(f"the secured broker exited: {(self.folder / 'broker.log').read_text()[-2000:]}")
                try:
                    if admin.list_topics(timeout=1).brokers:
                        return
                except Exception:  # noqa: BLE001 - not up yet
                    time.sleep(0.3)
            raise RuntimeError(f"the secured broker did not start in {timeout:.0f} s")
        finally:
            del admin

    def stop(self) -> None:
        """SIGKILL: a throwaway broker whose data is deleted needs no clean shutdown."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        shutil.rmtree(self.folder / "data", ignore_errors=True)


def _java(main: str, *args: str) -> list[str]:
    """A short-lived JVM tuned to start fast (C1 only, serial GC, small heap): the test broker
    lives for a minute and carries a handful of records."""
    java, _version = find_java()
    heap = os.environ.get("POSTBOX_SECURED_KAFKA_HEAP", "256m")
    return [str(java), f"-Xmx{heap}", "-Xms64m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-XX:-UsePerfData",
            "-Xshare:auto", "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={infra_dir() / 'local' / 'log4j2.properties'}",
            "-cp", f"{StackLayout.default().kafka_lib}/*", main, *args]  # fmt: skip


def _escape(value: str) -> str:
    """A value as java-properties text (backslash, and ':'/'=' are fine unescaped in values)."""
    return value.replace("\\", "\\\\")

