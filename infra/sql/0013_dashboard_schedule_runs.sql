-- The dashboard's schedules page (issue 17): a schedule's newest runs. Runs a schedule starts
-- carry the idempotency key "schedule:{name}:{tick}" (or "schedule:{name}:manual:{id}" for a
-- trigger); this partial index holds only those runs, newest first per workflow, so the page
-- reads a few index entries instead of every run of the workflow.
CREATE INDEX ripple_runs_scheduled ON ripple_runs (workflow, run_id DESC)
    WHERE idempotency_key LIKE 'schedule:%';
