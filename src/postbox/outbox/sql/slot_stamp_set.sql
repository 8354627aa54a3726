-- Stamp the replication slot: its statistics entry is created empty with the slot and dropped with
-- it, so the stats_reset this sets is seen again only while the same slot lives.
SELECT pg_catalog.pg_stat_reset_replication_slot(%(slot)s)
