-- Exact run counts per (minute created, workflow, status) for the dashboard overview, kept
-- without a hot row: every new, re-statused or deleted recent run appends a change row
-- (insert-only, so concurrent writers never wait on one another), the sweeper folds the changes
-- into ripple_run_counts, and readers add the changes not folded yet. "Recent" is two days, the
-- overview's day with a margin: older minutes are not counted.
CREATE TABLE ripple_run_counts (
    minute   timestamptz NOT NULL,
    workflow text NOT NULL,
    status   text NOT NULL,
    n        bigint NOT NULL,
    PRIMARY KEY (minute, workflow, status)
);

-- `n` runs of (minute, workflow) left status `left_status` (NULL: they are new) for
-- `entered_status` (NULL: they were deleted): one row per change, whatever its kind.
CREATE TABLE ripple_run_count_changes (
    minute         timestamptz NOT NULL,
    workflow       text NOT NULL,
    left_status    text,
    entered_status text,
    n              bigint NOT NULL
) WITH (
    -- Hot table: rows are appended by every status change and deleted by the next fold.
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_vacuum_cost_delay = 0
);

-- A batch of new runs: one change row per (minute, workflow, status) of the statement.
CREATE FUNCTION ripple_count_inserted_runs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO ripple_run_count_changes (minute, workflow, left_status, entered_status, n)
    SELECT date_trunc('minute', created_at, 'UTC'), workflow, NULL, status, count(*)
    FROM inserted_runs
    GROUP BY 1, 2, 4;
    RETURN NULL;
END
$$;

-- A batch of deleted runs (retention, purges): the recent ones leave their counts.
CREATE FUNCTION ripple_count_deleted_runs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO ripple_run_count_changes (minute, workflow, left_status, entered_status, n)
    SELECT date_trunc('minute', created_at, 'UTC'), workflow, status, NULL, count(*)
    FROM deleted_runs
    WHERE created_at >= now() - interval '2 days'
    GROUP BY 1, 2, 3;
    RETURN NULL;
END
$$;

-- One run's status changed (its workflow and creation time never do).
CREATE FUNCTION ripple_count_status_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO ripple_run_count_changes (minute, workflow, left_status, entered_status, n)
    VALUES (date_trunc('minute', NEW.created_at, 'UTC'), NEW.workflow, OLD.status, NEW.status, 1);
    RETURN NULL;
END
$$;

CREATE TRIGGER ripple_runs_count_inserted AFTER INSERT ON ripple_runs
    REFERENCING NEW TABLE AS inserted_runs
    FOR EACH STATEMENT EXECUTE FUNCTION ripple_count_inserted_runs();
CREATE TRIGGER ripple_runs_count_deleted AFTER DELETE ON ripple_runs
    REFERENCING OLD TABLE AS deleted_runs
    FOR EACH STATEMENT EXECUTE FUNCTION ripple_count_deleted_runs();
-- Row-level with a WHEN, so updates that keep the status (leases, heartbeats, journal flushes)
-- cost nothing (a statement-level trigger with transition tables cannot name the column).
CREATE TRIGGER ripple_runs_count_status AFTER UPDATE OF status ON ripple_runs
    FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status
          AND OLD.created_at >= now() - interval '2 days')
    EXECUTE FUNCTION ripple_count_status_change();

-- The runs of the last two days as they are now (changes wait for this transaction: creating
-- the triggers locked ripple_runs against writes).
INSERT INTO ripple_run_counts (minute, workflow, status, n)
SELECT date_trunc('minute', created_at, 'UTC'), workflow, status, count(*)
FROM ripple_runs
WHERE created_at >= now() - interval '2 days'
GROUP BY 1, 2, 3;
