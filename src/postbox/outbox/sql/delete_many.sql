-- Delete-in-transaction retention for a batch: one statement for every id of the batch.
DELETE FROM {schema}.outbox WHERE id = ANY(%b::uuid[])
