-- Workflows: runs, their journal, durable waits and the signal inbox.

-- One row per run. A run is claimable when its status is active and available_at <= now():
-- pending/sleeping/waiting runs become available at their timer (infinity: only a signal or a
-- child's end wakes them); a running run's available_at IS its lease expiry, so a run whose
-- worker died is claimable again once the lease passed, with no separate reaper.
CREATE TABLE ripple_runs (
    run_id            text PRIMARY KEY,
    workflow          text NOT NULL,
    -- NULL until the first claim pins the newest version the claiming worker serves
    version           integer,
    status            text NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'running', 'sleeping', 'waiting',
                          'completed', 'failed', 'canceled')),
    input             jsonb,
    output            jsonb,
    error             jsonb,
    -- workflow-level attempt (1-based once claimed)
    attempt           integer NOT NULL DEFAULT 0,
    idempotency_key   text,
    parent_run_id     text,
    parent_step_key   text,
    parent_step_seq   integer,
    deadline          timestamptz,
    retention_seconds double precision,
    trace             jsonb,
    available_at      timestamptz NOT NULL DEFAULT now(),
    lease_owner       text,
    -- fencing epoch: bumped by every claim and by cancel; every worker write names the epoch
    -- it claimed with, so a worker that lost its lease can no longer write
    epoch             bigint NOT NULL DEFAULT 0,
    step_count        integer NOT NULL DEFAULT 0,
    created_at        timestamptz NOT NULL DEFAULT now(),
    started_at        timestamptz,
    completed_at      timestamptz,
    updated_at        timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX ripple_runs_idempotency ON ripple_runs (workflow, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
-- The claim index: only active runs, ordered by when they become available.
CREATE INDEX ripple_runs_available ON ripple_runs (available_at)
    WHERE status IN ('pending', 'running', 'sleeping', 'waiting');
-- Listing: newest first (run ids are time-ordered uuid7 text), optionally by workflow/parent.
CREATE INDEX ripple_runs_workflow_list ON ripple_runs (workflow, run_id DESC);
CREATE INDEX ripple_runs_status_list ON ripple_runs (status, run_id DESC);
CREATE INDEX ripple_runs_parent ON ripple_runs (parent_run_id) WHERE parent_run_id IS NOT NULL;
CREATE INDEX ripple_runs_terminal ON ripple_runs (completed_at)
    WHERE status IN ('completed', 'failed', 'canceled');

-- The journal: one row per step key of a run (no FK, so inserts stay cheap; the sweeper
-- deletes a run's journal with the run).
CREATE TABLE ripple_steps (
    run_id       text NOT NULL,
    key          text NOT NULL,
    -- position of the step's call in a replay pass (order-change detection)
    seq          integer NOT NULL,
    kind         text NOT NULL,
    -- running (attempt started) | retrying | pending (timer/wait/child) | completed | failed
    status       text NOT NULL,
    attempts     integer NOT NULL DEFAULT 0,
    output       jsonb,
    error        jsonb,
    -- when a sleep/retry/wait/child timer is due (pending/retrying steps)
    due_at       timestamptz,
    started_at   timestamptz NOT NULL DEFAULT now(),
    completed_at timestamptz,
    PRIMARY KEY (run_id, key)
);

-- Durable waits of suspended runs. Found by (run_id, name) for signals and by event for
-- topic/payload resolution; the @> match is tested on those candidates only.
CREATE TABLE ripple_waits (
    run_id     text NOT NULL,
    step_key   text NOT NULL,
    step_seq   integer NOT NULL,
    name       text NOT NULL,
    event      text,
    match      jsonb,
    expires_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, step_key)
);
CREATE INDEX ripple_waits_name ON ripple_waits (run_id, name);
CREATE INDEX ripple_waits_event ON ripple_waits (event) WHERE event IS NOT NULL;

-- Signals that arrived before a matching wait existed, consumed earliest first.
CREATE TABLE ripple_signals (
    id         bigserial PRIMARY KEY,
    run_id     text NOT NULL,
    name       text NOT NULL,
    payload    jsonb,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ripple_signals_inbox ON ripple_signals (run_id, name, id);
