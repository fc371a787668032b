-- Idempotency keys of events, in a table of their own.
--
-- ripple_events becomes range-partitioned by its id (0028), and a partitioned table can only
-- enforce uniqueness on keys that include the partition column: the global uniqueness of an
-- event's idempotency key moves here. A key lives as long as its event (the sweeper deletes the
-- keys of the event partitions it dropped).
--
-- The copy reads ripple_events under its ordinary read lock, so publishes go on meanwhile;
-- 0028 copies the keys of events published while this ran, under its short exclusive lock.
CREATE TABLE ripple_event_keys (
    idempotency_key text PRIMARY KEY,
    event_id        uuid NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);
-- Retention deletes the keys of events older than the oldest event partition left.
CREATE INDEX ripple_event_keys_event ON ripple_event_keys (event_id);

INSERT INTO ripple_event_keys (idempotency_key, event_id, created_at)
SELECT idempotency_key, id, created_at FROM ripple_events WHERE idempotency_key IS NOT NULL;
