-- Flow control: priority, per-key concurrency and throttle, debounce (see workflows/store.py).
--
-- A workflow's options live in ripple_flow_controls (written when a process that has the
-- definition starts runs or a worker serving it starts). Every statement that creates a run
-- reads that row and stores the run's keys and limits with it, so the claim needs nothing else.
ALTER TABLE ripple_runs
    ADD COLUMN priority integer NOT NULL DEFAULT 0,
    ADD COLUMN concurrency_key text,
    ADD COLUMN concurrency_limit integer,
    ADD COLUMN throttle_key text,
    ADD COLUMN throttle_limit integer,
    ADD COLUMN throttle_period double precision,
    ADD COLUMN debounce_key text,
    -- why a pending run is not claimed: 'concurrency' | 'throttle' | 'debounce' (NULL: due)
    ADD COLUMN blocked_by text;

CREATE TABLE ripple_flow_controls (
    workflow          text PRIMARY KEY,
    concurrency_limit integer,
    -- key paths into the input (NULL with a limit: one shared key)
    concurrency_key   text[],
    throttle_limit    integer,
    throttle_period   double precision,
    throttle_key      text[],
    debounce_period   double precision,
    debounce_max_wait double precision,
    debounce_key      text[],
    updated_at        timestamptz NOT NULL DEFAULT now()
);

-- Active (running, sleeping, waiting) runs per concurrency key. The claim adds the slots it
-- grants with INSERT .. ON CONFLICT DO UPDATE, which locks the row and sees its latest
-- committed value, so concurrent claimers never grant more than `lim` between them; the
-- trigger below gives a slot back when a run leaves those statuses by any path.
CREATE TABLE ripple_concurrency_slots (
    workflow text NOT NULL,
    key      text NOT NULL,
    active   integer NOT NULL,
    lim      integer NOT NULL,
    -- slots the last claim granted (read back by that claim only)
    granted  integer NOT NULL,
    PRIMARY KEY (workflow, key)
);

-- Start times of the last `lim` starts per throttle key (the claim's sliding window).
CREATE TABLE ripple_throttle_windows (
    workflow text NOT NULL,
    key      text NOT NULL,
    starts   timestamptz[] NOT NULL,
    lim      integer NOT NULL,
    period   double precision NOT NULL,
    granted  integer NOT NULL,
    PRIMARY KEY (workflow, key)
);

-- Pending runs that jump the queue: the claim reads the `priority > 0` ones from here beside its
-- walk of ripple_runs_claim. Small: only prioritised pending runs that are not parked.
CREATE INDEX ripple_runs_priority ON ripple_runs (workflow, priority DESC, available_at)
    WHERE status = 'pending' AND priority > 0 AND available_at < 'infinity';

-- Runs parked by their concurrency key (available_at infinity), the next first: a freed slot
-- wakes exactly one, without scanning the key's other pending runs.
CREATE INDEX ripple_runs_parked ON ripple_runs (workflow, concurrency_key, priority DESC, run_id)
    WHERE status = 'pending' AND available_at = 'infinity' AND concurrency_key IS NOT NULL;

-- One not-yet-started debounced run per key: later starts update it (ON CONFLICT).
CREATE UNIQUE INDEX ripple_runs_debounce ON ripple_runs (workflow, debounce_key)
    WHERE status = 'pending' AND started_at IS NULL AND debounce_key IS NOT NULL;

-- A run of a concurrency key left running/sleeping/waiting (finished, failed, canceled,
-- retried, released): give its slot back and wake the key's next parked run. Locking the slot
-- row orders this with claims: a claim that parked a run committed before (and the next
-- statement here sees it), or claims after and sees the slot free. Parked runs a claim holds
-- are skipped: that claim sees the freed slot.
CREATE FUNCTION ripple_release_concurrency_slot() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE ripple_concurrency_slots SET active = greatest(active - 1, 0)
    WHERE workflow = OLD.workflow AND key = OLD.concurrency_key;
    UPDATE ripple_runs SET available_at = now(), blocked_by = NULL, updated_at = now()
    WHERE run_id = (
        SELECT p.run_id FROM ripple_runs p
        WHERE p.workflow = OLD.workflow AND p.concurrency_key = OLD.concurrency_key
          AND p.status = 'pending' AND p.available_at = 'infinity'
        ORDER BY p.priority DESC, p.run_id
        LIMIT 1
        FOR UPDATE SKIP LOCKED
    );
    RETURN NULL;
END
$$;

CREATE TRIGGER ripple_runs_release_slot
    AFTER UPDATE OF status ON ripple_runs
    FOR EACH ROW
    WHEN (OLD.concurrency_key IS NOT NULL
          AND OLD.status IN ('running', 'sleeping', 'waiting')
          AND NEW.status NOT IN ('running', 'sleeping', 'waiting'))
    EXECUTE FUNCTION ripple_release_concurrency_slot();

-- Schedules: one row per schedule, from code (`@workflow(schedule=...)`, written when a worker
-- serving the workflow starts) or the API. `next_run_at` is the next tick; a scheduler locks
-- due rows (FOR UPDATE SKIP LOCKED), fires the latest due tick (tick time in the idempotency
-- key: one run or event per tick whatever happens) and advances the row, in one transaction.
CREATE TABLE ripple_schedules (
    name          text PRIMARY KEY,
    workflow      text,
    topic         text,
    -- run input (workflow) or event payload (topic)
    input         jsonb,
    cron          text,
    every_seconds double precision,
    timezone      text NOT NULL DEFAULT 'UTC',
    overlap       text NOT NULL DEFAULT 'skip' CHECK (overlap IN ('skip', 'allow')),
    paused        boolean NOT NULL DEFAULT false,
    source        text NOT NULL DEFAULT 'api' CHECK (source IN ('api', 'code')),
    next_run_at   timestamptz NOT NULL,
    last_tick_at  timestamptz,
    last_run_id   text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    CHECK ((workflow IS NULL) <> (topic IS NULL)),
    CHECK ((cron IS NULL) <> (every_seconds IS NULL))
);
CREATE INDEX ripple_schedules_due ON ripple_schedules (next_run_at) WHERE NOT paused;
