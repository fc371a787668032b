-- Idempotency keys of signals (issue 18): a retried signal with the same key is acknowledged
-- again with the first call's result and observed once. `scope` is `run:<run id>` for a signal
-- to one run and `event:<event>` for signal_matching, so keys are per run / per event name.
-- `result` is what the first call answered ({"delivered": bool} or {"resumed": n}). Keys expire
-- with event retention (RIPPLE_EVENT_RETENTION_DAYS), deleted by the sweeper.
CREATE TABLE ripple_signal_keys (
    scope           text NOT NULL,
    idempotency_key text NOT NULL,
    result          jsonb,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, idempotency_key)
);
CREATE INDEX ripple_signal_keys_created ON ripple_signal_keys (created_at);
