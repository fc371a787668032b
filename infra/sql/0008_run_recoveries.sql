-- The crash budget. `recoveries` counts the claims of a run whose previous owner was lost
-- (its lease expired while the run was `running`: worker killed, OOM, node lost, stalled).
-- It is counted apart from a step's own attempts, so a deploy or a crash does not use up a
-- step's RetryPolicy; a run whose worker keeps dying is failed with WorkerLost once it passes
-- RIPPLE_MAX_RECOVERIES.
ALTER TABLE ripple_runs ADD COLUMN recoveries integer NOT NULL DEFAULT 0;
