-- The audit trail: one row per operator or admin action, inserted in the action's own
-- transaction (platform/access/audit_store.py). Ids are UUIDv7, so id order is time order and
-- the newest-first listing and its cursor walk the primary key.
CREATE TABLE ripple_audit (
    id          uuid PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT now(),
    actor       text NOT NULL,
    token_id    text,
    action      text NOT NULL,
    target      text,
    request_id  text,
    details     jsonb NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX ripple_audit_action ON ripple_audit (action, id);
