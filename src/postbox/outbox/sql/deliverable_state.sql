-- Whether the outbox's columns carry the deliverability rules (as domain types):
-- NULL when a column is not of its domain {schema}.<column> or the domain lacks its constraint
-- <column>_deliverable; else whether every one of the four constraints is validated.
SELECT CASE WHEN count(*) = 4 THEN bool_and(c.convalidated) END
  FROM pg_attribute a
  JOIN pg_type t ON t.oid = a.atttypid AND t.typtype = 'd' AND t.typname = a.attname
  JOIN pg_namespace n ON n.oid = t.typnamespace AND n.nspname = '{schema}'
  JOIN pg_constraint c ON c.contypid = t.oid AND c.conname = a.attname || '_deliverable'
 WHERE a.attrelid = to_regclass('{schema}.outbox')
   AND a.attname IN ('aggregate_type', 'aggregate_id', 'event_type', 'traceparent')
