-- Runs, their journal and waits, and webhook deliveries churn like queue tables: every run is
-- inserted, updated a few times (status and available_at are indexed, so no update is HOT) and
-- later deleted. Default autovacuum (20 % of the table) lets dead index entries pile up in front
-- of the claim scans; vacuum these tables after ~1 % churn and without cost-based throttling.
ALTER TABLE ripple_runs SET (
    fillfactor = 85,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);
ALTER TABLE ripple_steps SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_vacuum_cost_delay = 0
);
ALTER TABLE ripple_waits SET (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 500,
    autovacuum_vacuum_cost_delay = 0
);
ALTER TABLE ripple_webhook_deliveries SET (
    fillfactor = 85,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_vacuum_cost_delay = 0
);
