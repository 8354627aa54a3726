"""Find the programs the local stack needs and explain how to get any that are missing.

Each check fails with a StackError naming what is missing and the command that installs it, so a
fresh machine gets one clear message instead of a Java stack trace five minutes later.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from postbox.errors import StackError

INSTALL_HINT = "run ./dev.sh setup (or: apt-get install -y {pkgs})"
#: Any installed version at or above these serves (dev.sh checks the same before installing).
MIN_JAVA = 17
MIN_POSTGRES = 14
#: Where Debian and Ubuntu install Java runtimes (one folder per JRE/JDK, any vendor).
JVM_ROOT = Path("/usr/lib/jvm")
PG_ROOT = Path("/usr/lib/postgresql")


@dataclass(frozen=True)
class Toolchain:
    java: Path
    java_version: int
    mvn: Path
    pg_bin: Path
    redis_server: Path


def find_java() -> tuple[Path, int]:
    """A Java 17+ runtime: JAVA_HOME first, then `java` on PATH, then any JRE in /usr/lib/jvm
    (the newest there), so an older default `java` does not hide an installed newer one."""
    candidates: list[Path] = []
    if os.environ.get("JAVA_HOME"):
        candidates.append(Path(os.environ["JAVA_HOME"]) / "bin" / "java")
    on_path = shutil.which("java")
    if on_path:
        candidates.append(Path(on_path))
    candidates += sorted(JVM_ROOT.glob("*/bin/java")) if JVM_ROOT.is_dir() else []
    seen_versions: list[str] = []
    best: tuple[Path, int] | None = None
    for java in candidates:
        if not java.is_file():
            continue
        version = java_major_version(java)
        seen_versions.append(f"{java} is Java {version}")
        if version >= MIN_JAVA and java.parent.parent.parent != JVM_ROOT:
            return java, version  # chosen by the user (JAVA_HOME or PATH)
        if version >= MIN_JAVA and (best is None or version > best[1]):
            best = (java, version)
    if best is not None:
        return best
    found = "; ".join(seen_versions) or "no java on PATH, JAVA_HOME unset, none in /usr/lib/jvm"
    raise StackError(
        f"Kafka and Kafka Connect need Java {MIN_JAVA} or newer ({found})",
        fix=INSTALL_HINT.format(pkgs="default-jre-headless") + f", or set JAVA_HOME to a Java {MIN_JAVA}+ runtime",
    )


def java_major_version(java: Path) -> int:
    try:
        out = subprocess.run([str(java), "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not match:
        return 0
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def find_maven() -> Path:
    mvn = shutil.which("mvn")
    if not mvn:
        raise StackError(
            "Maven (mvn) is needed to resolve the Kafka, Connect and Debezium jars and is not on PATH",
            fix=INSTALL_HINT.format(pkgs="maven"),
        )
    return Path(mvn)


def find_pg_bin() -> Path:
    """The newest PostgreSQL server bin folder from Debian's packages (or POSTBOX_PG_BIN)."""
    env = os.environ.get("POSTBOX_PG_BIN")
    if env:
        path = Path(env)
        if not (path / "postgres").is_file():
            raise StackError(f"POSTBOX_PG_BIN={env}: no postgres binary there")
        return path
    versions = sorted(
        (p for p in PG_ROOT.glob("*/bin") if (p / "postgres").is_file() and (p / "initdb").is_file()),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    if versions and versions[-1].parent.name.isdigit() and int(versions[-1].parent.name) < MIN_POSTGRES:
        raise StackError(
            f"the newest PostgreSQL installed is {versions[-1].parent.name}; the local stack needs {MIN_POSTGRES} or newer",
            fix=INSTALL_HINT.format(pkgs="postgresql") + ", or set POSTBOX_PG_BIN to a newer server's bin folder",
        )
    if versions:
        return versions[-1]
    initdb = shutil.which("initdb")
    if initdb and (Path(initdb).resolve().parent / "postgres").is_file():
        return Path(initdb).resolve().parent
    raise StackError(
        "PostgreSQL server binaries (initdb, postgres, pg_ctl) are not installed",
        fix=INSTALL_HINT.format(pkgs="postgresql"),
    )


def find_redis_server() -> Path:
    path = shutil.which("redis-server") or ("/usr/bin/redis-server" if Path("/usr/bin/redis-server").is_file() else None)
    if not path:
        raise StackError("redis-server is not installed", fix=INSTALL_HINT.format(pkgs="redis-server"))
    return Path(path)


def toolchain() -> Toolchain:
    java, version = find_java()
    return Toolchain(java=java, java_version=version, mvn=find_maven(), pg_bin=find_pg_bin(), redis_server=find_redis_server())
