-- Fairness (see workflows/store/claim.py): pending runs of a fair workflow are claimed in a
-- weighted round robin across their fairness keys (stride scheduling), priority then FIFO
-- within a key.
--
-- A run of a workflow whose ripple_flow_controls row says `fairness` stores its key when it is
-- created (a start's override, else read from the input by `fairness_key_path`, else '').
ALTER TABLE ripple_runs ADD COLUMN fairness_key text;

ALTER TABLE ripple_flow_controls
    ADD COLUMN fairness boolean NOT NULL DEFAULT false,
    ADD COLUMN fairness_key_path text[],
    -- key -> weight (absent keys weigh 1)
    ADD COLUMN fairness_weights jsonb;

-- One row per (workflow, fairness key) ever seen. `pass` is the key's virtual time: every run
-- the claim takes of the key advances it by 1 / weight, and the claim serves the active keys
-- with the smallest pass first. A key is `active` from its first claimable pending run (pending
-- and not parked by concurrency) until a claim finds it has none left; only active keys cost
-- claims anything. A key that becomes active again starts at the smallest pass of the active
-- keys (it neither catches up for the time it was idle nor waits behind them). `touched`
-- changes whenever a transaction makes a run of the key claimable: a claim retires a key only
-- if it is unchanged since the claim's snapshot (else a run it cannot see may wait).
CREATE TABLE ripple_fair_keys (
    workflow text NOT NULL,
    key      text NOT NULL,
    weight   double precision NOT NULL DEFAULT 1,
    pass     double precision NOT NULL DEFAULT 0,
    active   boolean NOT NULL DEFAULT true,
    touched  bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (workflow, key)
);
CREATE INDEX ripple_fair_keys_active ON ripple_fair_keys (workflow, pass, key) WHERE active;

-- The claim's walk no longer passes over a fair backlog: fair pending runs leave the claim
-- index (and the priority index) and are claimed per key from ripple_runs_fair.
DROP INDEX ripple_runs_claim;
CREATE INDEX ripple_runs_claim ON ripple_runs (workflow, available_at)
    WHERE status IN ('pending', 'running', 'sleeping', 'waiting')
      AND (fairness_key IS NULL OR status <> 'pending');
DROP INDEX ripple_runs_priority;
CREATE INDEX ripple_runs_priority ON ripple_runs (workflow, priority DESC, available_at)
    WHERE status = 'pending' AND priority > 0 AND available_at < 'infinity'
      AND fairness_key IS NULL;
-- A key's head runs (priority, then FIFO).
CREATE INDEX ripple_runs_fair ON ripple_runs (workflow, fairness_key, priority DESC, available_at)
    WHERE status = 'pending' AND fairness_key IS NOT NULL AND available_at < 'infinity';
-- When a worker's next fair run is due.
CREATE INDEX ripple_runs_fair_due ON ripple_runs (workflow, available_at)
    WHERE status = 'pending' AND fairness_key IS NOT NULL AND available_at < 'infinity';

-- A run becoming claimable (created pending, retried or released back to pending, woken from
-- a concurrency park, moved to another key by a debounce) activates its key and changes its
-- `touched`, once per transaction and key: later runs of the same transaction see the row
-- their transaction already wrote (its xmin) and stop at one index probe, so a bulk start of
-- one key writes the key's row once.
CREATE FUNCTION ripple_touch_fair_key() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    vt double precision;
BEGIN
    PERFORM 1 FROM ripple_fair_keys
    WHERE workflow = NEW.workflow AND key = NEW.fairness_key
      AND xmin = pg_current_xact_id()::xid;
    IF FOUND THEN
        RETURN NULL;
    END IF;
    SELECT a.pass INTO vt FROM ripple_fair_keys a
    WHERE a.workflow = NEW.workflow AND a.active
    ORDER BY a.pass LIMIT 1;
    INSERT INTO ripple_fair_keys AS k (workflow, key, weight, pass)
    VALUES (
        NEW.workflow, NEW.fairness_key,
        coalesce((SELECT (f.fairness_weights ->> NEW.fairness_key)::float8
                  FROM ripple_flow_controls f WHERE f.workflow = NEW.workflow), 1),
        coalesce(vt, 0))
    ON CONFLICT (workflow, key) DO UPDATE
    SET active = true, touched = k.touched + 1, weight = excluded.weight,
        pass = CASE WHEN k.active THEN k.pass ELSE coalesce(vt, k.pass) END;
    RETURN NULL;
END
$$;

CREATE TRIGGER ripple_runs_fair_insert
    AFTER INSERT ON ripple_runs
    FOR EACH ROW
    WHEN (NEW.fairness_key IS NOT NULL AND NEW.status = 'pending'
          AND NEW.available_at < 'infinity')
    EXECUTE FUNCTION ripple_touch_fair_key();

CREATE TRIGGER ripple_runs_fair_update
    AFTER UPDATE OF status, available_at, fairness_key ON ripple_runs
    FOR EACH ROW
    WHEN (NEW.fairness_key IS NOT NULL AND NEW.status = 'pending'
          AND NEW.available_at < 'infinity'
          AND (OLD.status <> 'pending' OR OLD.available_at = 'infinity'
               OR OLD.fairness_key IS DISTINCT FROM NEW.fairness_key))
    EXECUTE FUNCTION ripple_touch_fair_key();
