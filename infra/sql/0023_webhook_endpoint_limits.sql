-- Webhook endpoint limits: the in-flight cap, the rate limit and the circuit breaker.
--
-- A subscription's budget lives in its health row, so every dispatcher process shares it:
-- `rate_open_at` is when its rate limit next lets a delivery be claimed (a GCRA schedule,
-- advanced by each claim), `consecutive_failures` counts failed attempts since the last
-- success, and `circuit_open_until` (NULL: closed) is when an open circuit lets its next
-- probe through.
ALTER TABLE ripple_webhook_health
    ADD COLUMN consecutive_failures integer NOT NULL DEFAULT 0,
    ADD COLUMN circuit_open_until timestamptz,
    ADD COLUMN rate_open_at timestamptz;

-- Claims still held, per subscription: what counts toward `maxInFlight`. Small (a claim ends
-- when its outcome is written), so counting an endpoint's held claims reads a few entries.
CREATE INDEX ripple_webhook_deliveries_held
    ON ripple_webhook_deliveries (subscription_id) WHERE claim_token IS NOT NULL;
