-- The replication slot's identity stamp: when its statistics were last reset (NULL: never, since
-- the slot was created or the server discarded its statistics). outbox/slot_identity.py says why.
SELECT stats_reset FROM pg_catalog.pg_stat_replication_slots WHERE slot_name = %(slot)s
