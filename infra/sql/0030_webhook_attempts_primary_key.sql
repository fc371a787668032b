-- ripple_webhook_attempts gets a primary key: (delivery_id, id). A partitioned table's key must
-- hold its partition column (delivery_id); an attempt's id (a sequence value) is unique on its
-- own, so the pair is too, and it is the order attempts are read in (a delivery's log).
--
-- The key's index replaces the (delivery_id, id) index, which it duplicates. The table from
-- before partitioning (its partition `_legacy`, while retained) kept its own key on id alone
-- (0028), under the name the new key takes: that one goes first (a partition may have one
-- primary key, and it can only be the table's).
--
-- Not online for attempt writes: the key's unique index is built on every partition under a
-- SHARE lock, which holds off the recorder's attempt inserts until this commits (they wait,
-- then proceed; deliveries are not blocked). A migration cannot build it CONCURRENTLY (it runs
-- as one transaction, and partition names are known only at run time); attempts are retained
-- like events, so the build reads at most a retention of attempt rows.
ALTER TABLE IF EXISTS ripple_webhook_attempts_legacy
    DROP CONSTRAINT IF EXISTS ripple_webhook_attempts_pkey;
ALTER TABLE ripple_webhook_attempts
    ADD CONSTRAINT ripple_webhook_attempts_pkey PRIMARY KEY (delivery_id, id);
DROP INDEX ripple_webhook_attempts_delivery;
