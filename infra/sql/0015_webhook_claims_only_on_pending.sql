-- A claim token is held only by a pending delivery (issue 20).
--
-- Ending a claim (an attempt's outcome, a release at shutdown) finds its deliveries by id and
-- token alone. It used to test `status = 'pending'` as well, and on a table not analyzed since a
-- backlog arrived the planner estimated a handful of pending rows: it read every pending
-- delivery through the status index and hash-joined the batch against them (20 ms for a batch
-- of 20 with 10,000 pending, most of Postgres' time per delivery). The token implies the status:
-- every statement that ends a delivery (finish, orphan sweep, redrive) clears it, and only a
-- due (so pending) delivery is claimed. This constraint makes that rule the database's.
-- A finished delivery holds no token (clearing one left behind is harmless: nothing can use it).
UPDATE ripple_webhook_deliveries SET claim_token = NULL
WHERE claim_token IS NOT NULL AND status <> 'pending';
ALTER TABLE ripple_webhook_deliveries ADD CONSTRAINT ripple_webhook_deliveries_claimed_pending
    CHECK (claim_token IS NULL OR status = 'pending');
