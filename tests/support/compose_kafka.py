"""The three Kafka nodes of infra/docker-compose.replicas.yml, run without a container engine.

Why: whether three nodes configured only through the image's environment form one quorum, and
replicate as the local stack does, shows only when they run. Each node gets the server.properties
the apache/kafka image writes from its ``KAFKA_*`` environment (``KAFKA_`` dropped, lower case,
``_`` → ``.``, ``__`` → ``_``, ``___`` → ``-``), is formatted with its ``CLUSTER_ID`` as the image
does, and runs from the local stack's jars of the same Kafka version. What only containers have
is stood in for, inside a private network and mount namespace (``unshare -mn``, root): each
service name resolves to an address of its own (127.0.0.2-4, a private /etc/hosts), its
listeners bind that address instead of every interface (each container has its own), the host's
published port is the EXTERNAL listener on 127.0.0.1, and log.dirs is a folder of the node's.

Run inside the namespace as ``python -m tests.support.compose_kafka WORKDIR``; prints its
evidence as one JSON line.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support import compose_files
from tests.support.child_process import LoggedChild

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
#: Variables the image does not turn into properties (docker/resources/common-scripts/kafka-propertiesSpec.json).
_EXCLUDED = {"KAFKA_VERSION", "KAFKA_HEAP_OPT", "KAFKA_LOG4J_OPTS", "KAFKA_OPTS", "KAFKA_JMX_OPTS", "KAFKA_JVM_PERFORMANCE_OPTS",
             "KAFKA_GC_LOG_OPTS", "KAFKA_LOG4J_ROOT_LOGLEVEL", "KAFKA_LOG4J_LOGGERS", "KAFKA_TOOLS_LOG4J_LOGLEVEL"}


def image_properties(env: dict[str, Any]) -> dict[str, str]:
    """The properties the apache/kafka image renders from a service's environment."""
    def name(var: str) -> str:
        return re.sub(r"_{1,3}", lambda m: {"_": ".", "__": "_", "___": "-"}[m.group()], var.removeprefix("KAFKA_").lower())

    return {name(k): str(v) for k, v in env.items() if k.startswith("KAFKA_") and k not in _EXCLUDED}


def _java(main: str, *args: str) -> list[str]:
    from tests.support.secured_kafka import _java as java

    return java(main, *args)


class Node(LoggedChild):
    stop_timeout = 30
    log_tail = 3000

    def __init__(self, work: Path, name: str, service: dict[str, Any], address: str) -> None:
        self.name, self.address = name, address
        self.dir = work / name
        self.dir.mkdir(parents=True)
        self.env = service["environment"]
        self.external_port = int(service["ports"][0].split(":")[1])
        props = image_properties(self.env)
        props["listeners"] = re.sub(r"(INTERNAL|CONTROLLER)://:", rf"\1://{address}:", props["listeners"])
        props["listeners"] = props["listeners"].replace("EXTERNAL://:", "EXTERNAL://127.0.0.1:")
        props["log.dirs"] = str(self.dir / "data")
        self.config = self.dir / "server.properties"
        self.config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        self.process: subprocess.Popen[bytes] | None = None

    def format(self) -> None:
        done = subprocess.run(_java("kafka.tools.StorageTool", "format", "-t", self.env["CLUSTER_ID"], "-c", str(self.config)),
                              capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise SystemExit(f"formatting {self.name} failed: {done.stdout[-1500:]}{done.stderr[-1500:]}")

    def start(self) -> None:
        with open(self.dir / "out.log", "ab") as log:
            self.process = subprocess.Popen(_java("kafka.Kafka", str(self.config)), cwd=self.dir, stdout=log, stderr=subprocess.STDOUT)


def _wait(check: Callable[[], bool], timeout: float, what: str, nodes: list[Node]) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        try:
            if check():
                return time.monotonic() - start
        except Exception:  # noqa: BLE001 - a cluster still forming answers with errors of every kind
            pass
        time.sleep(1)
    raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}\n" + "\n".join(f"--- {n.name}\n{n.log()}" for n in nodes))


def rehearse(work: Path) -> dict[str, Any]:
    from concurrent.futures import ThreadPoolExecutor

    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    services = compose_files.merged(INFRA / "docker-compose.yml", INFRA / "docker-compose.replicas.yml")["services"]
    kafka = {name: s for name, s in services.items() if s.get("image", "").startswith("apache/kafka:")}
    addresses = {name: f"127.0.0.{i + 2}" for i, name in enumerate(sorted(kafka, key=lambda n: int(kafka[n]["environment"]["KAFKA_NODE_ID"])))}
    work.mkdir(parents=True, exist_ok=True)
    hosts = work / "hosts"
    hosts.write_text("127.0.0.1 localhost\n" + "".join(f"{ip} {name}\n" for name, ip in addresses.items()))
    subprocess.run(["mount", "--bind", str(hosts), "/etc/hosts"], check=True)
    nodes = [Node(work, name, kafka[name], ip) for name, ip in addresses.items()]
    bootstrap = ",".join(f"127.0.0.1:{n.external_port}" for n in nodes)
    try:
        with ThreadPoolExecutor(len(nodes)) as pool:
            list(pool.map(Node.format, nodes))
        for node in nodes:
            node.start()
        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
        formed = _wait(lambda: len(admin.list_topics(timeout=5).brokers) == 3, 180, "three brokers in one cluster", nodes)
        brokers = sorted((b.id, b.host, b.port) for b in admin.list_topics(timeout=5).brokers.values())
        admin.create_topics([NewTopic("compose-check", num_partitions=3)])["compose-check"].result(30)  # the defaults decide
        replicas = sorted({len(p.replicas) for p in admin.list_topics("compose-check", timeout=10).topics["compose-check"].partitions.values()})
        config = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "compose-check")])
        min_isr = next(iter(config.values())).result(30)["min.insync.replicas"].value

        def produce(tag: str, timeout_ms: int) -> str | None:
            """30 records with acks=all and idempotence (as Connect's producer): the first error, if any."""
            producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "message.timeout.ms": timeout_ms,
                                 "log_level": 0})
            errors: list[str] = []
            for i in range(30):
                producer.produce("compose-check", key=str(i), value=tag, on_delivery=lambda err, _msg: errors.append(str(err)) if err else None)
            producer.flush(timeout_ms / 1000 + 10)
            return errors[0] if errors else None

        all_up = produce("three", 60000)
        nodes[-1].kill()
        one_down = produce("two", 60000)  # the dead node's partitions move after its session times out (9 s)
        nodes[-2].kill()
        two_down = produce("one", 15000)
        return {"formed_s": round(formed, 1), "brokers": brokers, "replicas": replicas, "min_insync_replicas": min_isr,
                "produce_all_up": all_up, "produce_one_down": one_down, "produce_two_down": two_down}
    finally:
        for node in nodes:
            node.stop()


def main() -> None:
    work = Path(sys.argv[1])
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    try:
        print(json.dumps(rehearse(work)))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
