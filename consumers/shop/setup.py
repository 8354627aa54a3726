"""Set the shop up: its SQL (idempotent, run with an admin connection) and its stock in Redis."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import psycopg
import redis

from consumers.shop.keys import StockKeys, key_patterns

SQL_DIR = Path(__file__).resolve().parent / "sql"


def apply_sql(admin_url: str) -> list[str]:
    """Apply ``consumers/shop/sql/*.sql`` in name order, in one transaction; returns the files."""
    files = sorted(SQL_DIR.glob("*.sql"))
    with psycopg.connect(admin_url, connect_timeout=10) as conn:
        with conn.transaction():
            # Serialise concurrent setups (two demos, a test): CREATE ... IF NOT EXISTS is not race-free.
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('postbox-shop-setup'))")
            for path in files:
                conn.execute(path.read_text(encoding="utf-8"))
    return [p.name for p in files]


def seed_stock(client: redis.Redis, units: Mapping[str, int], warehouse: str | None = None) -> None:
    """Put stock on the shelves: ``{sku: units}`` available, nothing reserved."""
    keys = StockKeys() if warehouse is None else StockKeys(warehouse)
    mapping = {sku: int(n) for sku, n in units.items()}
    with client.pipeline(transaction=True) as pipe:
        pipe.delete(keys.available, keys.reserved, keys.seeded)
        pipe.hset(keys.available, mapping=mapping)
        pipe.hset(keys.seeded, mapping=mapping)       # what was put on the shelves (for audits)
        pipe.execute()


def reset_redis(client: redis.Redis) -> int:
    """Delete every key the shop wrote (ledger, reservations, projections, applied counters)."""
    deleted = 0
    for pattern in key_patterns():
        batch: list[bytes] = []
        for key in client.scan_iter(match=pattern, count=1000):
            batch.append(key)
            if len(batch) >= 500:
                deleted += client.unlink(*batch)
                batch = []
        if batch:
            deleted += client.unlink(*batch)
    return deleted
