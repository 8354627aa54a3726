-- The newest checkpoint the slot has confirmed, counting only those recorded with the stamp the
-- slot carries now: a replaced slot's position says nothing about the rows before its creation.
SELECT c.taken_at, c.oldest_xid::text
  FROM {schema}.retention_checkpoints c, pg_catalog.pg_replication_slots s
 WHERE s.slot_name = %(slot)s AND c.lsn <= s.confirmed_flush_lsn AND c.slot_stamp = %(stamp)s
 ORDER BY c.taken_at DESC
 LIMIT 1
