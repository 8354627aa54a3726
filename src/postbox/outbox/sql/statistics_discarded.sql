-- When the server last reset its cluster-wide statistics: crash recovery (an immediate shutdown,
-- a kill) discards every statistic and sets this to the time it did, so a slot that lost its
-- stamp then can be told from one created since (outbox/slot_identity.py).
SELECT stats_reset FROM pg_catalog.pg_stat_archiver
