-- The slot stamp retention's checkpoints were recorded with (every stamped checkpoint carries the same one).
SELECT slot_stamp FROM {schema}.retention_checkpoints WHERE slot_stamp IS NOT NULL ORDER BY taken_at DESC LIMIT 1
