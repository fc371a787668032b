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
-- the claim takes of the key advances it by 1 / weight, and the claim serves the keys with the
-- smallest pass first. `pending` counts the key's claimable pending runs (pending, not parked
-- by concurrency): a key with none is out of ripple_fair_keys_active and costs claims nothing.
-- A key that becomes active again starts at the smallest pass of the active keys (it neither
-- catches up for the time it was idle nor waits behind them).
CREATE TABLE ripple_fair_keys (
    workflow text NOT NULL,
    key      text NOT NULL,
    weight   double precision NOT NULL DEFAULT 1,
    pass     double precision NOT NULL DEFAULT 0,
    pending  bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (workflow, key)
);
CREATE INDEX ripple_fair_keys_active ON ripple_fair_keys (workflow, pass) WHERE pending > 0;

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

-- Keep `pending` exact whatever path moves a fair run: creation, retries and releases back to
-- pending, concurrency parking and waking, cancellation, a debounce moving it to another key.
-- The claim's own pending -> running moves are counted by the claim statement (it advances
-- the key's pass in the same statement), so this trigger does not fire for them.
CREATE FUNCTION ripple_count_fair_run() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.fairness_key IS NOT NULL AND OLD.status = 'pending'
       AND OLD.available_at < 'infinity' THEN
        UPDATE ripple_fair_keys SET pending = greatest(pending - 1, 0)
        WHERE workflow = OLD.workflow AND key = OLD.fairness_key;
    END IF;
    IF NEW.fairness_key IS NOT NULL AND NEW.status = 'pending'
       AND NEW.available_at < 'infinity' THEN
        INSERT INTO ripple_fair_keys AS k (workflow, key, weight, pass, pending)
        VALUES (
            NEW.workflow, NEW.fairness_key,
            coalesce((SELECT (f.fairness_weights ->> NEW.fairness_key)::float8
                      FROM ripple_flow_controls f WHERE f.workflow = NEW.workflow), 1),
            coalesce((SELECT min(a.pass) FROM ripple_fair_keys a
                      WHERE a.workflow = NEW.workflow AND a.pending > 0), 0),
            1)
        ON CONFLICT (workflow, key) DO UPDATE
        SET pending = k.pending + 1, weight = excluded.weight,
            pass = CASE WHEN k.pending > 0 THEN k.pass
                        ELSE coalesce((SELECT min(a.pass) FROM ripple_fair_keys a
                                       WHERE a.workflow = k.workflow AND a.pending > 0), k.pass)
                   END;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER ripple_runs_fair_insert
    AFTER INSERT ON ripple_runs
    FOR EACH ROW
    WHEN (NEW.fairness_key IS NOT NULL)
    EXECUTE FUNCTION ripple_count_fair_run();

CREATE TRIGGER ripple_runs_fair_update
    AFTER UPDATE OF status, available_at, fairness_key ON ripple_runs
    FOR EACH ROW
    WHEN ((OLD.fairness_key IS NOT NULL OR NEW.fairness_key IS NOT NULL)
          AND ((OLD.fairness_key IS NOT NULL AND OLD.status = 'pending'
                AND OLD.available_at < 'infinity')
               IS DISTINCT FROM
               (NEW.fairness_key IS NOT NULL AND NEW.status = 'pending'
                AND NEW.available_at < 'infinity')
               OR (OLD.status = 'pending' AND NEW.status = 'pending'
                   AND OLD.fairness_key IS DISTINCT FROM NEW.fairness_key))
          AND NOT (OLD.status = 'pending' AND NEW.status = 'running'))
    EXECUTE FUNCTION ripple_count_fair_run();
