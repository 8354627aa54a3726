-- Whether this database has a logical replication slot of that name (only such a slot can be stamped).
SELECT 1 FROM pg_catalog.pg_replication_slots
 WHERE slot_name = %(slot)s AND slot_type = 'logical' AND database = current_database()
