-- Foundation: workers announce what they serve, so runs no live worker can take are visible.
CREATE TABLE ripple_workers (
    worker_id    text PRIMARY KEY,
    hostname     text NOT NULL,
    pid          integer NOT NULL,
    -- [{"workflow": "order", "version": 1}, ...]
    serves       jsonb NOT NULL DEFAULT '[]',
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ripple_workers_heartbeat ON ripple_workers (heartbeat_at);
