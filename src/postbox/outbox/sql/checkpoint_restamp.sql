-- The operator vouched for the slot (`postbox db retention --trust-slot`): its checkpoints now
-- carry the slot's new stamp. Checkpoints recorded before stamps existed stay unstamped.
UPDATE {schema}.retention_checkpoints SET slot_stamp = %(stamp)s WHERE slot_stamp IS NOT NULL
