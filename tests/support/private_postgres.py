"""A throwaway PostgreSQL cluster of the test's own, for what the shared stack's cannot show:
roles are cluster-wide, and the shared cluster already has the outbox's, so a first `db init`
that must create them (the path a managed database's admin takes) needs a cluster without them.

Built with the local stack's own LocalPostgres (same server binaries, same configuration) in a
temporary state folder, on a free loopback port; ``stop()`` stops exactly that server and removes
its data.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from postbox.stack.layout import StackLayout
from postbox.stack.postgres import LocalPostgres
from postbox.stack.prereqs import find_pg_bin
from postbox.testing.server import free_port


@contextmanager
def private_postgres() -> Iterator[LocalPostgres]:
    """A running private cluster with the ``postbox`` database; its superuser through
    ``admin_url()`` (the unix socket), other roles over 127.0.0.1 with scram passwords."""
    root = Path(tempfile.mkdtemp(prefix="postbox-pg-"))
    server = LocalPostgres(StackLayout(root), find_pg_bin(), free_port())
    try:
        server.init()
        server.start()
        server.ensure_database()
        yield server
    finally:
        data_home = server.layout.pg_link.resolve().parent if server.layout.pg_link.is_symlink() else None
        try:
            server.stop("fast")
        finally:
            server.destroy()
            shutil.rmtree(root, ignore_errors=True)
            if data_home is not None:  # /var/lib/postbox/<digest> when the postgres user cannot reach /tmp
                with contextlib.suppress(OSError):
                    data_home.rmdir()
