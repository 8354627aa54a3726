"""PostgreSQL of the local stack: its own data directory, logical WAL, the outbox database.

PostgreSQL refuses to run as root, and CI runs as root: then every server command runs as the
`postgres` OS user (created by Debian's package) through `runuser`, and the data folder belongs
to that user. If that user cannot reach the state folder (a checkout under a private home), the
data lives under /var/lib/postbox/ and `.postbox/postgres` is a link to it.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
import subprocess
from pathlib import Path

from postbox.database_url import database_url
from postbox.errors import StackError
from postbox.stack.layout import StackLayout
from postbox.stack.processes import port_open, port_owner
from postbox.stack.templates import render, write_if_changed

DATABASE = "postbox"
SERVER_USER = "postgres"


class LocalPostgres:
    name = "postgres"

    def __init__(self, layout: StackLayout, pg_bin: Path | None, port: int) -> None:
        self.layout = layout
        self.pg_bin = pg_bin
        self.port = port

    # -- identity --------------------------------------------------------------------------------
    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.layout.pg_log

    def admin_conninfo(self, dbname: str = DATABASE) -> str:
        """Superuser connection over the private unix socket (trust auth; never over TCP)."""
        return f"host={self.layout.pg_socket_dir} port={self.port} user={SERVER_USER} dbname={dbname}"

    def admin_url(self, dbname: str = DATABASE) -> str:
        return database_url(user=SERVER_USER, host=str(self.layout.pg_socket_dir), port=self.port, dbname=dbname)

    # -- running as the postgres OS user --------------------------------------------------------
    def _as_server_user(self, argv: list[str]) -> list[str]:
        if os.geteuid() != 0:
            return argv
        return ["runuser", "-u", SERVER_USER, "--", *argv]

    def _server_uid_gid(self) -> tuple[int, int] | None:
        if os.geteuid() != 0:
            return None
        try:
            entry = pwd.getpwnam(SERVER_USER)
        except KeyError:
            raise StackError(
                f"running as root, PostgreSQL needs the '{SERVER_USER}' OS user, which does not exist",
                fix="apt-get install -y postgresql (it creates the user), or run postbox as a normal user",
            ) from None
        return entry.pw_uid, entry.pw_gid

    def _bin(self, name: str) -> str:
        if self.pg_bin is None:
            raise StackError("PostgreSQL binaries were not located")
        return str(self.pg_bin / name)

    def _run(self, argv: list[str], what: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(self._as_server_user(argv), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        if result.returncode != 0:
            detail = (result.stderr or result.stdout).strip().splitlines()[-3:]
            raise StackError(f"PostgreSQL {what} failed: {' / '.join(detail)} (log: {self.log_path})")
        return result

    def _prepare_home(self) -> None:
        ids = self._server_uid_gid()
        home = self.layout.pg_link
        if home.exists() or home.is_symlink():
            return
        home.parent.mkdir(parents=True, exist_ok=True)
        if ids is None:
            home.mkdir()
            return
        home.mkdir()
        os.chown(home, *ids)
        probe = subprocess.run(["runuser", "-u", SERVER_USER, "--", "test", "-w", str(home)], capture_output=True)
        if probe.returncode != 0:
            # The postgres user cannot traverse to the state folder: keep the data elsewhere.
            home.rmdir()
            digest = hashlib.sha256(str(self.layout.root).encode()).hexdigest()[:12]
            real = Path("/var/lib/postbox") / digest / "postgres"
            real.mkdir(parents=True, exist_ok=True)
            for folder in (real.parent.parent, real.parent, real):
                os.chmod(folder, 0o755)
            os.chown(real, *ids)
            home.symlink_to(real)

    # -- lifecycle ----------------------------------------------------------------------------------
    def initialized(self) -> bool:
        return (self.layout.pg_data / "PG_VERSION").is_file()

    def running(self) -> bool:
        pidfile = self.layout.pg_data / "postmaster.pid"
        if not pidfile.is_file():
            return False
        result = subprocess.run(
            self._as_server_user([self._bin("pg_ctl"), "status", "-D", str(self.layout.pg_data)]),
            capture_output=True, text=True, stdin=subprocess.DEVNULL,
        )
        return result.returncode == 0

    def pid(self) -> int | None:
        try:
            return int((self.layout.pg_data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def init(self) -> bool:
        """initdb once; then (re)write postbox's configuration. True when anything changed."""
        self._prepare_home()
        changed = False
        if not self.initialized():
            self._run(
                [
                    self._bin("initdb"), "-D", str(self.layout.pg_data), "-U", SERVER_USER,
                    "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C.UTF-8",
                    "--no-instructions",
                ],
                "initdb",
            )
            changed = True
        conf = render("postgresql.conf", {"pg_port": self.port, "socket_dir": self.layout.pg_socket_dir})
        hba = render("pg_hba.conf", {})
        ids = self._server_uid_gid()
        data = self.layout.pg_data
        for target, content in ((data / "postbox.conf", conf), (data / "pg_hba.conf", hba)):
            if write_if_changed(target, content):
                changed = True
                if ids:
                    os.chown(target, *ids)
        main_conf = data / "postgresql.conf"
        include = "include = 'postbox.conf'\n"
        if include not in main_conf.read_text():
            with open(main_conf, "a") as handle:
                handle.write("\n# added by postbox\n" + include)
            changed = True
        self.layout.pg_socket_dir.mkdir(exist_ok=True)
        if ids:
            os.chown(self.layout.pg_socket_dir, *ids)
        return changed

    def start(self) -> str:
        if self.running():
            return "already running"
        if port_open("127.0.0.1", self.port):
            owner = port_owner(self.port)
            raise StackError(
                f"port {self.port} (PostgreSQL) is taken by {owner or 'another process'}",
                fix="stop it (`pg_lsclusters` lists the system's clusters; `pg_ctlcluster <version> main stop` stops one) "
                "or set POSTBOX_PG_PORT to a free port",
            )
        self._run(
            [self._bin("pg_ctl"), "start", "-D", str(self.layout.pg_data), "-l", str(self.log_path), "-w", "-t", "60"],
            "start",
        )
        return "started"

    def stop(self, mode: str = "fast") -> bool:
        """Stop the server; mode 'immediate' is a crash stop (fault tests): WAL recovery on start."""
        if not self.running():
            return False
        self._run([self._bin("pg_ctl"), "stop", "-D", str(self.layout.pg_data), "-m", mode, "-w", "-t", "60"], "stop")
        return True

    def ensure_database(self) -> bool:
        """Create the app database if missing. True when created."""
        import psycopg

        with psycopg.connect(self.admin_conninfo("postgres"), autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone()
            if exists:
                return False
            conn.execute(f'CREATE DATABASE "{DATABASE}"')
            return True

    def destroy(self) -> None:
        home = self.layout.pg_link
        if home.is_symlink():
            shutil.rmtree(home.resolve(), ignore_errors=True)
            home.unlink()
        else:
            shutil.rmtree(home, ignore_errors=True)
