-- The claim index, per workflow. Claims used to scan ripple_runs_available (available_at only)
-- and filter by workflow; on a table without statistics (fresh, or right after a burst) the
-- planner instead intersected it with ripple_runs_workflow_list, which holds every run of the
-- workflow ever (history included), so each claim cost time proportional to the backlog and
-- history. Claims and the next-due query now walk this index once per served workflow, in
-- availability order, and stop after the batch they need: their cost no longer depends on the
-- backlog, on history, or on other workflows' runs. Partial: only active runs are in it, so it
-- stays small and builds quickly on upgrade.
CREATE INDEX ripple_runs_claim ON ripple_runs (workflow, available_at)
    WHERE status IN ('pending', 'running', 'sleeping', 'waiting');
DROP INDEX ripple_runs_available;
