-- The oldest retention hold that only a republish may release (kind other than the one given).
SELECT reason FROM {schema}.retention_holds WHERE kind <> %(kind)s ORDER BY since LIMIT 1
