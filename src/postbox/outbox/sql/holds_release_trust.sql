-- Release the holds an operator's `--trust-slot` may release (the slot's stamp went with the
-- server's statistics); holds that need a republish stay.
DELETE FROM {schema}.retention_holds WHERE kind = %(kind)s
