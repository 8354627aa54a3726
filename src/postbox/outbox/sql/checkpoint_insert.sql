-- A retention checkpoint (035_retention_checkpoints.sql), with the stamp of the slot that must confirm it.
INSERT INTO {schema}.retention_checkpoints (lsn, oldest_xid, slot_stamp)
VALUES (pg_current_wal_insert_lsn(), pg_snapshot_xmin(pg_current_snapshot()), %(stamp)s)
RETURNING lsn::text
