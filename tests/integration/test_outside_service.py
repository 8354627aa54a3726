"""#13.1 proof: postbox-cdc as a library in someone else's service, outside any postbox checkout.

The test builds the wheel from this checkout, installs it into a fresh virtual environment in a
temporary folder, and runs a small service there against the stack, the way the README's "Add
postbox to your service" tells a new user to: its own schemas folder, `postbox db init` against a
database of its own (a scratch database the test creates as admin and drops again), an emit next
to a business row in one transaction, a consumer with one handler (`postbox consume`), and
`postbox tail`. Nothing of the checkout is importable there: the folder is outside it and the
environment names no checkout.

The dependencies' wheels are cached between runs (keyed by constraints.txt and the Python version),
so only the first run on a machine downloads them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
import redis
from psycopg.conninfo import make_conninfo


pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
EXTRAS = "cli,binary"
SCHEMA = {
    "type": "record",
    "name": "SignedUp",
    "fields": [{"name": "user_id", "type": "string"}, {"name": "email", "type": "string"}],
}


def _run(argv: list[str], *, cwd: Path, env: dict[str, str] | None = None, timeout: float = 120) -> str:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _wheelhouse() -> Path:
    """A cache of the dependencies' wheels, keyed by the pins and the interpreter."""
    key = hashlib.sha256((ROOT / "constraints.txt").read_bytes() + sys.version.encode()).hexdigest()[:16]
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "postbox-tests" / f"wheelhouse-{key}"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv outside the checkout with the wheel built from this checkout; its bin folder."""
    work = tmp_path_factory.mktemp("outside")
    dist = work / "dist"
    _run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(ROOT)], cwd=work)
    (wheel,) = dist.glob("postbox_cdc-*.whl")
    # A bare venv, filled by this interpreter's pip (--python): no ensurepip, no byte-compiling.
    _run([sys.executable, "-m", "venv", "--without-pip", str(work / "venv")], cwd=work)
    pip = [sys.executable, "-m", "pip", "--python", str(work / "venv" / "bin" / "python"), "--disable-pip-version-check", "-q"]
    house = _wheelhouse()
    if not house.is_dir():
        _run([*pip, "download", "-d", str(house), "-c", str(ROOT / "constraints.txt"), f"{wheel}[{EXTRAS}]"], cwd=work, timeout=300)
    _run([*pip, "install", "--no-compile", "--no-index", "--find-links", str(house), f"{wheel}[{EXTRAS}]"], cwd=work, timeout=300)
    return work / "venv" / "bin"


@pytest.fixture
def service(tmp_path: Path, unique: str) -> Path:
    """The user's service folder: schemas/, the emitting code and the consumer's handlers."""
    folder = tmp_path / "signup-service"
    (folder / "schemas" / f"signup{unique}").mkdir(parents=True)
    (folder / "schemas" / f"signup{unique}" / "SignedUp.v1.avsc").write_text(json.dumps(SCHEMA))
    (folder / "app.py").write_text(textwrap.dedent(f"""
        import os, sys
        import psycopg
        from postbox import outbox

        def sign_up(user_id: str, email: str) -> str:
            with psycopg.connect(os.environ["POSTBOX_DATABASE_URL"]) as conn, conn.transaction():
                conn.execute("INSERT INTO svc{unique}.users (id, email) VALUES (%s, %s)", (user_id, email))
                event = outbox.emit(conn, "signup{unique}", user_id, "SignedUp", {{"user_id": user_id, "email": email}})
            return str(event.id)

        if __name__ == "__main__":
            print(sign_up(sys.argv[1], sys.argv[2]))
    """))
    (folder / "handlers.py").write_text(textwrap.dedent(f"""
        from postbox.consumer import App
        from postbox.effects import aggregate_keys

        app = App("mailer{unique}")

        @app.handler("signup{unique}", "SignedUp")
        def welcome(event, fx):
            k = aggregate_keys("signup{unique}", event.aggregate_id)
            fx.hset(k("welcome"), {{"email": event.payload["email"], "event": event.id}})
    """))
    return folder


def _environment(bin_dir: Path, admin_url: str) -> dict[str, str]:
    """What a user's shell holds after `eval "$(postbox env)"` in the postbox checkout (the settings,
    and the Redis fsync policy the consumer's ACL user cannot read), with the venv first on PATH;
    nothing names the checkout."""
    exported = _run([sys.executable, "-m", "postbox", "env"], cwd=ROOT)
    settings = dict(shlex.split(line.removeprefix("export "))[0].split("=", 1) for line in exported.splitlines() if line.startswith("export "))
    assert "POSTBOX_REDIS_APPENDFSYNC" in settings, exported
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("POSTBOX_", "PYTHON", "VIRTUAL_ENV"))}
    return {
        **keep,
        "PATH": f"{bin_dir}{os.pathsep}{keep.get('PATH', '')}",
        **settings,
        "POSTBOX_ADMIN_DATABASE_URL": admin_url,
    }


def test_a_service_outside_the_checkout_emits_consumes_and_tails(installed, service, admin_conn, admin_database_url,
                                                                 admin_redis_url, unique):
    env = _environment(installed, admin_database_url)
    where = _run([str(installed / "python"), "-c", "import postbox, postbox.resources as r; print(postbox.__file__); print(r.SQL_DIR)"],
                 cwd=service, env=env)
    assert str(ROOT) not in where and str(installed.parent) in where, where
    # What travels in the wheel (#13.1): db init's SQL, the Lua apply script, the connector template, py.typed.
    shipped = _run([str(installed / "python"), "-c", "import json, postbox.resources as r; p = r.PACKAGE_DIR; print(json.dumps("
                    "[p.joinpath('py.typed').is_file(), r.CONNECTOR_TEMPLATE.is_file(), (r.LUA_DIR / 'apply_effects.lua').is_file(), "
                    "sorted(f.name for f in r.SQL_DIR.glob('*.sql'))]))"], cwd=service, env=env)
    typed, connector, lua, sql = json.loads(shipped)
    assert typed and connector and lua, shipped
    assert sql == sorted(f.name for f in (ROOT / "src" / "postbox" / "sql").glob("*.sql")), shipped

    # `postbox db init` from the wheel, against a database of the user's own (created and dropped here).
    scratch = f"svc_{unique}"
    admin_conn.execute(f'CREATE DATABASE "{scratch}"')
    try:
        out = _run(["postbox", "db", "init", "--admin-url", make_conninfo(admin_database_url, dbname=scratch)], cwd=service, env=env)
        assert "created table postbox.outbox" in out, out
    finally:
        admin_conn.execute(f'DROP DATABASE "{scratch}" WITH (FORCE)')
    assert "1 schema(s)" in _run(["postbox", "schemas", "check"], cwd=service, env=env)
    (listed,) = json.loads(_run(["postbox", "schemas", "list", "--json"], cwd=service, env=env))
    assert (listed["aggregate_type"], listed["event_type"], listed["topic"]) == (f"signup{unique}", "SignedUp", f"outbox.event.signup{unique}")

    # The business table is the app's own DDL, made with the admin connection (the app role may only insert).
    admin_conn.execute(f"CREATE SCHEMA svc{unique}")
    admin_conn.execute(f"CREATE TABLE svc{unique}.users (id text PRIMARY KEY, email text NOT NULL)")
    admin_conn.execute(f"GRANT USAGE ON SCHEMA svc{unique} TO postbox_app")
    admin_conn.execute(f"GRANT INSERT ON svc{unique}.users TO postbox_app")
    try:
        event_id = _run(["python", "app.py", "u-1", "ada@example.com"], cwd=service, env=env).strip()
        assert uuid.UUID(event_id).version == 7
        assert admin_conn.execute(f"SELECT email FROM svc{unique}.users WHERE id = 'u-1'").fetchone() == ("ada@example.com",)
        _consume_once(service, env, admin_redis_url, unique, event_id)
        tailed = json.loads(_run(["postbox", "tail", f"outbox.event.signup{unique}", "--json", "--limit", "1"], cwd=service, env=env))
        records = tailed["records"] if isinstance(tailed, dict) else tailed
        assert records and records[0]["event"]["id"] == event_id, tailed
        assert records[0]["value"]["payload"] == {"user_id": "u-1", "email": "ada@example.com"}, tailed  # decoded with ./schemas
    finally:
        admin_conn.execute(f"DROP SCHEMA svc{unique} CASCADE")


def _consume_once(service: Path, env: dict[str, str], admin_redis_url: str, unique: str, event_id: str) -> None:
    """`postbox consume handlers:app` until the handler's effect is in Redis, then a clean stop."""
    key = f"{{signup{unique}:u-1}}:welcome"
    check = redis.Redis.from_url(admin_redis_url)
    log = service / "consume.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(["postbox", "consume", "handlers:app"], cwd=service, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 60
            while not check.exists(key) and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
            assert check.hgetall(key) == {b"email": b"ada@example.com", b"event": event_id.encode()}, log.read_text()
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=60)
            check.delete(key)
            check.close()
    assert code == 0, log.read_text()
