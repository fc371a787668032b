-- Topics, subscriptions, events and durable queues (helper B, issue 5).

-- Every published event. The idempotency key is unique while the event is retained: a repeat
-- publish returns the first event's id and fans out nothing.
CREATE TABLE ripple_events (
    id              uuid PRIMARY KEY,
    topic           text NOT NULL,
    payload         jsonb NOT NULL,
    idempotency_key text,
    -- W3C trace context of the publisher, when tracing is on.
    trace           jsonb,
    created_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT ripple_events_idempotency_key UNIQUE (idempotency_key)
);
CREATE INDEX ripple_events_created ON ripple_events (created_at);
CREATE INDEX ripple_events_topic_created ON ripple_events (topic, created_at);

CREATE TABLE ripple_subscriptions (
    id            uuid PRIMARY KEY,
    pattern       text NOT NULL,
    kind          text NOT NULL CHECK (kind IN ('queue', 'webhook', 'workflow')),
    -- The target's JSON form, always with "type" (= kind).
    target        jsonb NOT NULL CHECK (target ? 'type'),
    -- Deliver only when payload @> filter (NULL: every event).
    filter        jsonb CHECK (filter IS NULL OR jsonb_typeof(filter) = 'object'),
    status        text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'paused', 'disabled')),
    status_reason text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ripple_subscriptions_kind ON ripple_subscriptions (kind);

-- One row; bumped in the same transaction as every subscription change, so each process can
-- check its compiled subscription cache with one cheap read (a lost wake hint cannot leave a
-- process stale for longer than the poll interval).
CREATE TABLE ripple_subscription_version (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    version   bigint NOT NULL
);
INSERT INTO ripple_subscription_version (singleton, version) VALUES (true, 0);

-- Per-queue settings; a queue without a row uses the defaults.
CREATE TABLE ripple_queues (
    name         text PRIMARY KEY,
    max_receives integer NOT NULL DEFAULT 10 CHECK (max_receives >= 1),
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);

-- Messages of every queue (the queue name is a value). Acked messages are deleted at once.
-- A message is in flight while receive_count > 0 and visible_at > now(); dead letters have
-- dead_at set. The receipt of a delivery is (id, receive_count): a later receive bumps
-- receive_count, which fences off the older receipt.
CREATE TABLE ripple_queue_messages (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue            text NOT NULL,
    body             jsonb NOT NULL,
    headers          jsonb NOT NULL DEFAULT '{}',
    group_id         text,
    deduplication_id text,
    visible_at       timestamptz NOT NULL DEFAULT now(),
    receive_count    integer NOT NULL DEFAULT 0,
    dead_at          timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now()
) WITH (
    -- Hot table: rows are inserted, updated twice and deleted within seconds.
    fillfactor = 80,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);
-- Claims of ungrouped messages: the visible ones of a queue, oldest visibility first.
CREATE INDEX ripple_queue_messages_ready ON ripple_queue_messages (queue, visible_at)
    WHERE dead_at IS NULL AND group_id IS NULL;
-- Claims of FIFO groups: the head (lowest id) of each group.
CREATE INDEX ripple_queue_messages_groups ON ripple_queue_messages (queue, group_id, id)
    WHERE dead_at IS NULL AND group_id IS NOT NULL;
-- Dead letters, listed oldest first.
CREATE INDEX ripple_queue_messages_dead ON ripple_queue_messages (queue, id)
    WHERE dead_at IS NOT NULL;
-- Deduplication while the message exists (including as a dead letter).
CREATE UNIQUE INDEX ripple_queue_messages_dedup ON ripple_queue_messages (queue, deduplication_id)
    WHERE deduplication_id IS NOT NULL;
