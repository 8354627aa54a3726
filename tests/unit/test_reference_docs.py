"""The reference pages cannot drift from the code: docs/configuration.md lists every POSTBOX_*
variable the code reads (and none it does not), the consumer's settings and every secret's _FILE
form; docs/cli.md and the consumer table are what tools/gen_reference.py makes of the commands
and settings today."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

from postbox.consumer.config import ConsumerConfig, env_name
from postbox.secret_env import FILE_SUFFIX, SECRET_VARIABLES

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "configuration.md"
VARIABLE = re.compile(r"POSTBOX_[A-Z0-9_]*[A-Z0-9]")
#: Names in the code that are no setting of the user's: the supervisor's hand-over to its workers,
#: a placeholder in docstrings (``POSTBOX_X``), the prefix of the connector's variables (each listed
#: in full) and the test hook the fault suite sets.
NOT_SETTINGS = {"POSTBOX_WORKER_INDEX", "POSTBOX_SUPERVISOR_PID", "POSTBOX_X", "POSTBOX_CDC",
                "POSTBOX_TEST_HOLD_BEFORE_COMMIT"}  # fmt: skip


def _read_by_code() -> set[str]:
    names: set[str] = set()
    for path in [*(ROOT / "src").rglob("*.py"), *(ROOT / "connectors").glob("*.json")]:
        names |= set(VARIABLE.findall(path.read_text()))
    names |= {env_name(f.name) for f in fields(ConsumerConfig) if f.name not in ("sources", "kafka_properties")}
    return names - NOT_SETTINGS


def test_every_variable_the_code_reads_is_documented():
    documented = set(VARIABLE.findall(PAGE.read_text()))
    missing = sorted(_read_by_code() - documented)
    assert not missing, f"docs/configuration.md lacks {missing}"


def test_every_documented_variable_is_read_by_the_code():
    files = {name + FILE_SUFFIX for name in SECRET_VARIABLES}
    unknown = sorted(set(VARIABLE.findall(PAGE.read_text())) - _read_by_code() - files)
    assert not unknown, f"docs/configuration.md names variables nothing reads: {unknown}"


def test_every_secret_has_its_file_form_documented():
    text = PAGE.read_text()
    assert [name for name in SECRET_VARIABLES if f"`{name}{FILE_SUFFIX}`" not in text] == []


def test_generated_pages_are_current():
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_reference.py"), "--check"], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
