-- Operating runs and events (issue 16): forks, backfills and replays.

-- A fork records the run it was copied from.
ALTER TABLE ripple_runs ADD COLUMN forked_from text;

-- The subscription-set version the publisher matched the event against (its compiled cache;
-- see ripple.platform.events.subscriptions). A subscription created at version V was matched live
-- against exactly the events tagged >= V, so a backfill delivers the others: no event twice,
-- none missed at the live boundary. NULL for events published before this migration.
ALTER TABLE ripple_events ADD COLUMN subscriptions_version bigint;

-- Backfill state and progress of a subscription created with backfill_since.
ALTER TABLE ripple_subscriptions
    ADD COLUMN backfill_since timestamptz,
    -- the subscription-set version that created it (events tagged below it are backfilled)
    ADD COLUMN backfill_version bigint,
    -- progress: the last event delivered in (created_at, id) order, and how many so far
    ADD COLUMN backfill_cursor_at timestamptz,
    ADD COLUMN backfill_cursor_id uuid,
    ADD COLUMN backfill_delivered bigint NOT NULL DEFAULT 0,
    ADD COLUMN backfill_done_at timestamptz;

-- Events a running backfill already delivered: its last pass delivers the matching events
-- not in here (committed behind the cursor by a publish that was still in flight); emptied
-- when the backfill finishes.
CREATE TABLE ripple_backfill_events (
    subscription_id uuid NOT NULL,
    event_id        uuid NOT NULL,
    PRIMARY KEY (subscription_id, event_id)
);

-- A replay re-delivers an event to a webhook subscription under a new delivery id: deliveries
-- are unique per (event, subscription, replay); live deliveries have the nil replay id.
ALTER TABLE ripple_webhook_deliveries
    ADD COLUMN replay_id uuid NOT NULL DEFAULT '00000000-0000-0000-0000-000000000000';
ALTER TABLE ripple_webhook_deliveries
    DROP CONSTRAINT ripple_webhook_deliveries_event_id_subscription_id_key;
ALTER TABLE ripple_webhook_deliveries
    ADD CONSTRAINT ripple_webhook_deliveries_event_sub_replay
    UNIQUE (event_id, subscription_id, replay_id);
