-- Webhook deliveries: one row per (event, webhook subscription), self-contained (topic, payload
-- and event time are copied) so event retention never breaks a pending delivery.
-- No foreign key to ripple_subscriptions: the dispatcher fails deliveries whose subscription was
-- deleted, and only claims deliveries of active subscriptions.
CREATE TABLE ripple_webhook_deliveries (
    id               uuid PRIMARY KEY,
    subscription_id  uuid NOT NULL,
    event_id         uuid NOT NULL,
    topic            text NOT NULL,
    payload          jsonb,
    event_time       timestamptz NOT NULL,
    -- pending | delivered | failed
    status           text NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts         integer NOT NULL DEFAULT 0,
    -- When pending: due time; while claimed it is also the lease expiry.
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    -- Set by a claim; the finishing update must present it (fencing a stale dispatcher).
    claim_token      uuid,
    last_status_code integer,
    last_error       text,
    trace            jsonb,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    delivered_at     timestamptz,
    UNIQUE (event_id, subscription_id)
);
CREATE INDEX ripple_webhook_deliveries_due
    ON ripple_webhook_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX ripple_webhook_deliveries_sub
    ON ripple_webhook_deliveries (subscription_id, status, id);
CREATE INDEX ripple_webhook_deliveries_status ON ripple_webhook_deliveries (status, id);

-- Every attempt, for operators: outcome, status code, latency, error class, response head.
CREATE TABLE ripple_webhook_attempts (
    id            bigserial PRIMARY KEY,
    delivery_id   uuid NOT NULL REFERENCES ripple_webhook_deliveries (id) ON DELETE CASCADE,
    attempt       integer NOT NULL,
    started_at    timestamptz NOT NULL,
    latency_ms    double precision NOT NULL,
    -- delivered | retry | failed | disabled
    outcome       text NOT NULL,
    status_code   integer,
    error         text,
    response_body text
);
CREATE INDEX ripple_webhook_attempts_delivery ON ripple_webhook_attempts (delivery_id, id);

-- Per-subscription health: since when it has been failing continuously (NULL: healthy).
CREATE TABLE ripple_webhook_health (
    subscription_id uuid PRIMARY KEY,
    failing_since   timestamptz,
    last_success_at timestamptz,
    last_failure_at timestamptz
);
