-- Dead letters move out of ripple_queue_messages into a table of their own, range-partitioned
-- by the time they died, so retention drops them a partition at a time like events (pgmq
-- archives to a table of its own; SQS moves them to a dead-letter queue).
--
-- A dead letter keeps its message's id (it is listed, paged and redriven by it; a redrive puts
-- it back under that id). The table is partitioned by `dead_at` itself, a timestamptz:
-- ripple_partitions_ensure learns to bound such a key by the time, not a UUIDv7 of it.
-- A receive marks a message that has used up its receives dying (`dead_at`, as before, which
-- takes it out of every claim index) and the statement after it moves the message here
-- (subscribers/queues/queue_store.py, BURY).
CREATE TABLE ripple_queue_dead_letters (
    id               bigint NOT NULL,
    queue            text NOT NULL,
    body             jsonb NOT NULL,
    headers          jsonb NOT NULL DEFAULT '{}',
    group_id         text,
    deduplication_id text,
    receive_count    integer NOT NULL,
    created_at       timestamptz NOT NULL,
    dead_at          timestamptz NOT NULL DEFAULT now(),
    -- Listed oldest id first per queue; the key must hold the partition column.
    PRIMARY KEY (queue, id, dead_at)
) PARTITION BY RANGE (dead_at);

-- The deduplication ids of dead letters, in a table of their own (as ripple_event_keys holds
-- events' idempotency keys, 0026): a send checks one index, not one per partition. A
-- deduplication id is held while its message exists, live (ripple_queue_messages's unique
-- index) or dead (here); a send checks both in one snapshot (a unique index cannot span the
-- two tables). A key goes with its dead letter: when it is redriven or purged, and when its
-- partition is dropped (the sweeper deletes the keys older than the oldest partition left).
CREATE TABLE ripple_queue_dead_keys (
    queue            text NOT NULL,
    deduplication_id text NOT NULL,
    message_id       bigint NOT NULL,
    -- Its dead letter's dead_at.
    dead_at          timestamptz NOT NULL,
    PRIMARY KEY (queue, deduplication_id)
);
CREATE INDEX ripple_queue_dead_keys_dead_at ON ripple_queue_dead_keys (dead_at);

-- As in 0028, with the bound of each partition taken from the key column's type.
CREATE OR REPLACE FUNCTION ripple_partitions_ensure(step interval, upto timestamptz)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    t record;
    col record;
    last timestamptz;
    part text;
    by_time boolean;
    made integer := 0;
BEGIN
    IF step < interval '1 minute' THEN
        RAISE EXCEPTION 'partition interval % is shorter than a minute', step;
    END IF;
    -- One creator at a time, whichever process (sweepers, a publisher's fallback).
    PERFORM pg_advisory_xact_lock(hashtext('ripple_partitions_ensure'));
    FOR t IN SELECT * FROM ripple_partitioned_tables ORDER BY position LOOP
        SELECT a.atttypid = 'timestamptz'::regtype INTO by_time
        FROM pg_attribute a
        WHERE a.attrelid = t.parent::regclass AND a.attname = t.key_column;
        SELECT max(upper) INTO last FROM ripple_partitions WHERE parent = t.parent;
        WHILE last < upto LOOP
            part := t.parent || '_p' || to_char(last AT TIME ZONE 'UTC', 'YYYYMMDD"t"HH24MISS');
            EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS) %s',
                           part, t.parent,
                           CASE WHEN cardinality(t.options) > 0
                                THEN 'WITH (' || array_to_string(t.options, ', ') || ')'
                                ELSE '' END);
            -- Per-column statistics targets (LIKE does not copy them).
            FOR col IN SELECT attname, attstattarget FROM pg_attribute
                       WHERE attrelid = t.parent::regclass AND attnum > 0
                         AND NOT attisdropped AND attstattarget >= 0
            LOOP
                EXECUTE format('ALTER TABLE %I ALTER COLUMN %I SET STATISTICS %s',
                               part, col.attname, col.attstattarget);
            END LOOP;
            IF by_time THEN
                EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                               t.parent, part, last, last + step);
            ELSE
                EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                               t.parent, part, ripple_uuid7_floor(last),
                               ripple_uuid7_floor(last + step));
            END IF;
            INSERT INTO ripple_partitions (name, parent, lower, upper)
            VALUES (part, t.parent, last, last + step);
            last := last + step;
            made := made + 1;
        END LOOP;
    END LOOP;
    RETURN made;
END
$$;

INSERT INTO ripple_partitioned_tables (parent, key_column, position, options, hold, follows)
VALUES ('ripple_queue_dead_letters', 'dead_at', 4, '{}', NULL, NULL);

-- The first partition takes every dead letter so far (retired once its upper bound, today's
-- UTC midnight, is older than the dead letter retention); ensure continues from there, a week
-- ahead like the others (0028), and the sweeper keeps them ahead at RIPPLE_PARTITION_INTERVAL.
INSERT INTO ripple_partitions (name, parent, lower, upper)
VALUES ('ripple_queue_dead_letters_legacy', 'ripple_queue_dead_letters', '-infinity',
        date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC');
DO $$
DECLARE
    p record;
BEGIN
    SELECT name, parent, upper INTO p FROM ripple_partitions
    WHERE parent = 'ripple_queue_dead_letters';
    EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (MINVALUE) TO (%L)',
                   p.name, p.parent, p.upper);
END
$$;
SELECT ripple_partitions_ensure(interval '1 day', date_trunc('day', now() AT TIME ZONE 'UTC')
                                                  AT TIME ZONE 'UTC' + interval '8 days');

-- Today's dead letters move, in this transaction. Online: the DELETE locks only the dead rows,
-- which no receive, ack or nack touches (each of them reads live messages only), and its
-- table lock (ROW EXCLUSIVE) conflicts with no writer; dead letters are few (a message dies
-- after max_receives failed deliveries), so one statement suffices.
WITH moved AS (
    DELETE FROM ripple_queue_messages WHERE dead_at IS NOT NULL
    RETURNING id, queue, body, headers, group_id, deduplication_id, receive_count, created_at,
              dead_at
), keys AS (
    INSERT INTO ripple_queue_dead_keys (queue, deduplication_id, message_id, dead_at)
    SELECT queue, deduplication_id, id, dead_at FROM moved WHERE deduplication_id IS NOT NULL
)
INSERT INTO ripple_queue_dead_letters (id, queue, body, headers, group_id, deduplication_id,
                                       receive_count, created_at, dead_at)
SELECT id, queue, body, headers, group_id, deduplication_id, receive_count, created_at, dead_at
FROM moved;
