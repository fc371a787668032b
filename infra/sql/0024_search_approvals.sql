-- Search attributes, approvals and the approval signing key.

-- A run's search attributes: one row per (run, name), the value in the column of its type.
-- Written only by a trigger on the journal insert of a `ctx.set_attributes` entry (kind
-- 'attributes'), so the flush, group commit and finish paths need no statement of their own
-- and a run that sets none writes nothing here. No FK (as ripple_steps): the run's retention
-- deletes these rows with the run.
CREATE TABLE ripple_run_attributes (
    run_id     text NOT NULL,
    name       text NOT NULL,
    type       text NOT NULL CHECK (type IN ('str', 'int', 'float', 'bool', 'datetime')),
    value_text text,
    value_num  numeric,
    value_bool boolean,
    value_time timestamptz,
    PRIMARY KEY (run_id, name)
);
-- Equality and ranges per attribute name, one index per typed column.
CREATE INDEX ripple_run_attributes_text ON ripple_run_attributes (name, value_text, run_id)
    WHERE value_text IS NOT NULL;
CREATE INDEX ripple_run_attributes_num ON ripple_run_attributes (name, value_num, run_id)
    WHERE value_num IS NOT NULL;
CREATE INDEX ripple_run_attributes_bool ON ripple_run_attributes (name, value_bool, run_id)
    WHERE value_bool IS NOT NULL;
CREATE INDEX ripple_run_attributes_time ON ripple_run_attributes (name, value_time, run_id)
    WHERE value_time IS NOT NULL;

-- The journal entry's output is a JSON array of {name, type, value}; a later set of the same
-- name overrides the earlier value.
CREATE FUNCTION ripple_record_run_attributes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO ripple_run_attributes
        (run_id, name, type, value_text, value_num, value_bool, value_time)
    SELECT NEW.run_id, a.name, a.type,
           CASE WHEN a.type = 'str' THEN a.value #>> '{}' END,
           CASE WHEN a.type IN ('int', 'float') THEN (a.value #>> '{}')::numeric END,
           CASE WHEN a.type = 'bool' THEN (a.value #>> '{}')::boolean END,
           CASE WHEN a.type = 'datetime' THEN (a.value #>> '{}')::timestamptz END
    FROM jsonb_to_recordset(NEW.output) AS a(name text, type text, value jsonb)
    ON CONFLICT (run_id, name) DO UPDATE
    SET type = excluded.type, value_text = excluded.value_text,
        value_num = excluded.value_num, value_bool = excluded.value_bool,
        value_time = excluded.value_time;
    RETURN NULL;
END
$$;

-- The WHEN clause is evaluated without calling the function: other journal inserts pay a
-- comparison, nothing more.
CREATE TRIGGER ripple_steps_attributes AFTER INSERT ON ripple_steps
    FOR EACH ROW WHEN (NEW.kind = 'attributes') EXECUTE FUNCTION ripple_record_run_attributes();

-- Approvals: one row per `ctx.step.wait_for_approval` of a run, inserted with the wait's
-- registration. `decided_at` set once: a second decision is refused (single use).
CREATE TABLE ripple_approvals (
    run_id      text NOT NULL,
    step        text NOT NULL,
    workflow    text NOT NULL,
    details     jsonb,
    approvers   text[],
    expires_at  timestamptz,
    created_at  timestamptz NOT NULL DEFAULT now(),
    decided_at  timestamptz,
    approved    boolean,
    decided_by  text,
    comment     text,
    PRIMARY KEY (run_id, step)
);
CREATE INDEX ripple_approvals_pending ON ripple_approvals (created_at)
    WHERE decided_at IS NULL;

-- The server key approval tokens are signed with: made once by the first process that needs
-- it, shared by every API process and worker through the database.
CREATE TABLE ripple_approval_keys (
    singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    secret     bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
