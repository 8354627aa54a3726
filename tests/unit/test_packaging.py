"""#13.1: `pip install postbox-cdc` (no extras) is enough to emit: the writer, codec and schemas import
and encode without the consumer's or the CLI's dependencies, and the metadata says so."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import postbox

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
#: What the extras bring; a base install has none of them.
EXTRA_ONLY = ["confluent_kafka", "redis", "hiredis", "prometheus_client", "typer", "click", "rich", "httpx", "yaml"]

_BLOCKED_IMPORT = textwrap.dedent("""
    import importlib.abc, sys
    BLOCKED = set(sys.argv[1].split(","))

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"{name} is not installed (blocked by the test)")
            return None

    sys.meta_path.insert(0, Block())
    import json, pathlib, tempfile
    folder = pathlib.Path(tempfile.mkdtemp()) / "order"
    folder.mkdir()
    (folder / "Placed.v1.avsc").write_text(json.dumps(
        {"type": "record", "name": "Placed", "fields": [{"name": "total", "type": "long"}]}))
    from postbox.outbox import Outbox, AsyncOutbox
    from postbox.codec import AvroCodec
    from postbox.schemas import SchemaRepository
    from postbox.db import init_database
    row = Outbox(schemas_dir=folder.parent).rows.prepare("order", "o-1", "Placed", {"total": 5})
    assert row.params[4][:2] == b"\\xc3\\x01", row.params[4][:2]
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
    print("loaded:", loaded)
""")


def test_the_writer_imports_and_encodes_without_the_consumer_or_cli_dependencies():
    done = subprocess.run([sys.executable, "-c", _BLOCKED_IMPORT, ",".join(EXTRA_ONLY)],
                          capture_output=True, text=True, timeout=60, cwd="/")
    assert done.returncode == 0, done.stderr
    assert "loaded: []" in done.stdout


def test_the_base_install_depends_on_plain_psycopg_and_fastavro_only():
    base = {_name(r) for r in PYPROJECT["project"]["dependencies"]}
    assert base == {"psycopg", "fastavro"}
    assert not any("[binary]" in r for r in PYPROJECT["project"]["dependencies"])
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert {"confluent-kafka", "redis", "hiredis", "prometheus-client"} <= {_name(r) for r in extras["consumer"]}
    assert {"typer", "rich", "httpx"} <= {_name(r) for r in extras["cli"]}
    assert any(r.startswith("psycopg[binary]") for r in extras["binary"])
    assert {"opentelemetry-api", "opentelemetry-sdk"} <= {_name(r) for r in extras["otel"]}  # #16.4 spans per event


def test_one_version_source_git_read_by_version_and_build_info():
    """The version comes from git at build time (tests/unit/test_builds_from_git.py builds it);
    the package, `postbox --version` and postbox_build_info read the installed metadata."""
    from importlib.metadata import version

    from prometheus_client import CollectorRegistry

    from postbox.consumer.metrics import register_build_info

    assert PYPROJECT["project"]["name"] == "postbox-cdc"
    assert "version" in PYPROJECT["project"]["dynamic"] and "version" not in PYPROJECT["project"]
    assert PYPROJECT["tool"]["hatch"]["version"] == {"source": "code", "path": "tools/git_version.py", "expression": "version()"}
    assert postbox.__version__ == version("postbox-cdc")
    done = subprocess.run([sys.executable, "-m", "postbox", "--version"], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == f"postbox {version('postbox-cdc')}"
    registry = CollectorRegistry()
    register_build_info(registry)
    assert registry.get_sample_value("postbox_build_info", {"version": version("postbox-cdc"), **_runtime_labels()}) == 1


def _runtime_labels() -> dict[str, str]:
    import platform

    import confluent_kafka

    return {"python": platform.python_version(), "confluent_kafka": confluent_kafka.__version__, "librdkafka": confluent_kafka.libversion()[0]}


def _name(requirement: str) -> str:
    for stop in "[<>=!~; ":
        requirement = requirement.split(stop)[0]
    return requirement.lower()
