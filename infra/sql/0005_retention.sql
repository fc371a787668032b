-- Retention (issue 8): the run hold flag and indexes the sweeper's batch deletes walk.

-- A held run is never deleted by retention, whatever its age (legal hold, debugging).
ALTER TABLE ripple_runs ADD COLUMN hold boolean NOT NULL DEFAULT false;

-- Finished deliveries, oldest change first (delivered/failed rows past the event retention).
CREATE INDEX ripple_webhook_deliveries_finished ON ripple_webhook_deliveries (updated_at)
    WHERE status IN ('delivered', 'failed');

-- Attempt log rows by age, for deliveries still retrying past the retention.
CREATE INDEX ripple_webhook_attempts_started ON ripple_webhook_attempts (started_at);
