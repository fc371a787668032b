-- Time partitions, step 1 of 2: the bookkeeping, and the bound of the tables as they are.
--
-- ripple_events, ripple_webhook_deliveries and ripple_webhook_attempts become range-partitioned
-- by a UUIDv7 (0028): an event by its id, a delivery by its id (which carries its event's time,
-- see subscribers/webhooks/webhook.py), an attempt by its delivery's id. A UUIDv7 starts with its
-- Unix time in milliseconds, so a range of ids is a range of time.
-- Today's tables become one partition each, covering every id before a cutoff one to two days
-- ahead. The CHECK constraints below state that bound; added NOT VALID they take their
-- exclusive lock for an instant and scan nothing; 0028 validates them (without blocking writes)
-- before it attaches, so ATTACH PARTITION has no scan to do under its lock.

-- The lowest UUIDv7 of the millisecond `t` falls in: every id made at or after `t` is >= it.
CREATE FUNCTION ripple_uuid7_floor(t timestamptz) RETURNS uuid
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT (lpad(to_hex(floor(extract(epoch FROM t) * 1000)::bigint), 12, '0')
            || '70008000000000000000')::uuid
$$;

-- A random UUIDv7 of time `t` (as ripple.platform.core.ids makes them), for rows written in SQL
-- (tests, benchmarks, seeds): a random v4 id may fall where no partition is.
CREATE FUNCTION ripple_uuid7(t timestamptz DEFAULT clock_timestamp()) RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE
AS $$
    SELECT (lpad(to_hex(floor(extract(epoch FROM t) * 1000)::bigint), 12, '0') || '7'
            || substr(replace(gen_random_uuid()::text, '-', ''), 14))::uuid
$$;

-- The partitioned tables the sweeper manages: the column they are partitioned by, and the
-- storage parameters each new partition gets (a partitioned table itself has none).
CREATE TABLE ripple_partitioned_tables (
    parent     text PRIMARY KEY,
    key_column text NOT NULL,
    -- DDL takes the tables' locks in this order, the order writers take them in (an event, its
    -- deliveries, their attempts).
    position   integer NOT NULL UNIQUE,
    options    text[] NOT NULL DEFAULT '{}',
    -- Retention keeps an expired partition holding a row for which this is true (a retention
    -- hold: a delivery still pending, say of a paused subscription)...
    hold       text,
    -- ...or whose rows belong to the partition of this table over the same range, still kept
    -- (the attempt log of deliveries kept).
    follows    text REFERENCES ripple_partitioned_tables (parent)
);
-- Every partition of those tables, with the time range its ids cover ([lower, upper)).
-- Partitions are contiguous: the sweeper creates each new one at the upper bound of the last.
CREATE TABLE ripple_partitions (
    name   text PRIMARY KEY,
    parent text NOT NULL REFERENCES ripple_partitioned_tables (parent),
    lower  timestamptz NOT NULL,
    upper  timestamptz NOT NULL,
    CHECK (lower < upper),
    UNIQUE (parent, upper)
);

INSERT INTO ripple_partitioned_tables (parent, key_column, position, options, hold, follows)
VALUES
    ('ripple_events', 'id', 1, '{}', NULL, NULL),
    ('ripple_webhook_deliveries', 'id', 2,
     (SELECT coalesce(reloptions, '{}') FROM pg_class
      WHERE oid = 'ripple_webhook_deliveries'::regclass),
     'next_attempt_at IS NOT NULL', NULL);
INSERT INTO ripple_partitioned_tables (parent, key_column, position, options, hold, follows)
VALUES ('ripple_webhook_attempts', 'delivery_id', 3, '{}', NULL, 'ripple_webhook_deliveries');

-- The cutoff: UTC midnight after next.
INSERT INTO ripple_partitions (name, parent, lower, upper)
SELECT t.parent || '_legacy', t.parent, '-infinity',
       date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' + interval '2 days'
FROM ripple_partitioned_tables t;

DO $$
DECLARE
    t record;
BEGIN
    FOR t IN SELECT p.parent, p.key_column, r.upper
             FROM ripple_partitioned_tables p JOIN ripple_partitions r ON r.parent = p.parent
             ORDER BY p.position
    LOOP
        EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (%I < %L::uuid) NOT VALID',
                       t.parent, t.parent || '_legacy_bound', t.key_column,
                       ripple_uuid7_floor(t.upper));
    END LOOP;
END
$$;
