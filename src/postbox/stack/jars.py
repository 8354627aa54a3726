"""Resolve the Kafka, Connect and Debezium jars with Maven into the state folder.

Versions are pinned in `infra/maven/*/pom.xml`; Maven's local repository (~/.m2) is the cache
shared between runs and checkouts, and a stamp (hash of the pom) skips resolution entirely when
the jars in `.postbox/lib` already match the pom.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from postbox.errors import StackError
from postbox.stack.checkout import infra_dir
from postbox.stack.layout import StackLayout


#: The JVM options of Maven's one short run when the user set no MAVEN_OPTS: the client compiler
#: only and the serial collector. A copy-dependencies run against a warm ~/.m2 is start-up work that
#: the optimising compiler and G1's threads never pay back: 14.8 -> 7.7 s of CPU a run (the same
#: jars), measured on the 2-core CI host; a fresh checkout runs two.
SHORT_RUN_MAVEN_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


@dataclass(frozen=True)
class JarSet:
    """One pom resolved into one folder."""

    name: str
    pom: Path
    target: Path
    maven_flags: tuple[str, ...] = ()

    def stamp_file(self) -> Path:
        return self.target / ".postbox-stamp"

    def wanted_stamp(self) -> str:
        return hashlib.sha256(self.pom.read_bytes() + " ".join(self.maven_flags).encode()).hexdigest()

    def up_to_date(self) -> bool:
        stamp = self.stamp_file()
        return stamp.is_file() and stamp.read_text().strip() == self.wanted_stamp() and any(self.target.glob("*.jar"))


def jar_sets(layout: StackLayout) -> list[JarSet]:
    maven = infra_dir() / "maven"
    return [
        JarSet("kafka", maven / "kafka" / "pom.xml", layout.kafka_lib),
        # The worker provides Kafka's own APIs and slf4j; copies inside the plugin would shadow them.
        JarSet(
            "debezium",
            maven / "debezium" / "pom.xml",
            layout.debezium_plugin,
            ("-DexcludeGroupIds=org.apache.kafka,org.slf4j",),
        ),
    ]


def resolve(jar_set: JarSet, mvn: Path, log: Path) -> bool:
    """Copy the pom's runtime dependencies into its folder; False when already up to date."""
    if jar_set.up_to_date():
        return False
    tmp = jar_set.target.with_name(jar_set.target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    argv = [
        str(mvn), "-B", "-q", "-f", str(jar_set.pom),
        "dependency:copy-dependencies", f"-DoutputDirectory={tmp}", "-DincludeScope=runtime",
        *jar_set.maven_flags,
    ]
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        out.write(f"\n==== {' '.join(argv)}\n".encode())
        out.flush()
        env = {**os.environ, "MAVEN_OPTS": os.environ.get("MAVEN_OPTS") or SHORT_RUN_MAVEN_OPTS}
        result = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    if result.returncode != 0:
        raise StackError(
            f"Maven could not resolve the {jar_set.name} jars from {jar_set.pom} (see {log})",
            fix="check network access to Maven Central and the versions pinned in the pom",
        )
    shutil.rmtree(jar_set.target, ignore_errors=True)
    tmp.rename(jar_set.target)
    jar_set.stamp_file().write_text(jar_set.wanted_stamp() + "\n")
    return True
