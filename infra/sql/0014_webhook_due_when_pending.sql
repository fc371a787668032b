-- Webhook claims read the due index in order whatever the statistics say (issue 20).
--
-- The claim used to ask for `status = 'pending' AND next_attempt_at <= now()`. On a table that
-- had not been analyzed since it filled (a fresh install, a burst after a quiet hour) the
-- planner estimated a handful of pending rows, read every pending delivery through a bitmap scan
-- and sorted them, on every claim: 8-12 ms per claim with a 20,000-delivery backlog.
-- Now a finished delivery (delivered or failed) has no next attempt: next_attempt_at is NULL,
-- "due" is `next_attempt_at <= now()` alone, and its default estimate (a third of the table)
-- makes the ordered index scan the cheap plan with or without statistics.
ALTER TABLE ripple_webhook_deliveries ALTER COLUMN next_attempt_at DROP NOT NULL;
UPDATE ripple_webhook_deliveries SET next_attempt_at = NULL WHERE status <> 'pending';
ALTER TABLE ripple_webhook_deliveries ADD CONSTRAINT ripple_webhook_deliveries_due_iff_pending
    CHECK ((status = 'pending') = (next_attempt_at IS NOT NULL));
DROP INDEX ripple_webhook_deliveries_due;
CREATE INDEX ripple_webhook_deliveries_due
    ON ripple_webhook_deliveries (next_attempt_at) WHERE next_attempt_at IS NOT NULL;

-- The attempt log's foreign key checked (and share-locked) the delivery row once per attempt
-- written, inside the statement that had just updated that row. Attempts are only written by
-- that statement, joined to the delivery it updated, and retention deletes them with their
-- delivery explicitly, so the check guarded nothing the writes do not already ensure.
ALTER TABLE ripple_webhook_attempts
    DROP CONSTRAINT ripple_webhook_attempts_delivery_id_fkey;
