-- The outbox rows of a reconcile window, by their UUIDv7 ids: the id carries its creation time,
-- so a range of ids is a range of time. A range on the primary key prunes the time partitions
-- (40_partitions.sql) to those the window overlaps and reads each one's index in order; no
-- other index is needed (every index is paid on every emit). The bounds are computed by the
-- caller (the smallest id of a millisecond), so the planner sees constants.
SELECT id::text, aggregate_type, aggregate_id, created_at
  FROM {schema}.outbox
 WHERE id >= %(low)s::uuid AND id < %(high)s::uuid
   AND (%(aggregate_type)s::text IS NULL OR aggregate_type = %(aggregate_type)s::text)
 ORDER BY id
