-- Time partitions, step 2 of 2: events, webhook deliveries and their attempts become
-- range-partitioned tables; today's tables become their first partitions.
--
-- Online: the VALIDATEs scan each table while writes go on (they lock out other DDL only);
-- everything after them takes each table's exclusive lock for catalog changes alone (renames,
-- an empty partitioned table, its indexes on no rows, an ATTACH whose bound the validated
-- CHECK already proves, a few empty partitions ahead), so writers wait for an instant.
-- Processes of the previous release must be stopped by then: their event insert names the
-- unique index on idempotency_key that the partitioned table cannot have (docs/operations.md).
ALTER TABLE ripple_events VALIDATE CONSTRAINT ripple_events_legacy_bound;
ALTER TABLE ripple_webhook_deliveries VALIDATE CONSTRAINT ripple_webhook_deliveries_legacy_bound;
ALTER TABLE ripple_webhook_attempts VALIDATE CONSTRAINT ripple_webhook_attempts_legacy_bound;

-- Creates the partitions every managed table lacks up to `upto`, each `step` long, from the
-- upper bound of its newest one (so they stay contiguous); returns how many it created.
-- CREATE TABLE + ATTACH PARTITION takes a SHARE UPDATE EXCLUSIVE lock on the parent, which
-- writers do not wait for (CREATE TABLE ... PARTITION OF would take an exclusive one).
CREATE FUNCTION ripple_partitions_ensure(step interval, upto timestamptz) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    t record;
    col record;
    last timestamptz;
    part text;
    made integer := 0;
BEGIN
    IF step < interval '1 minute' THEN
        RAISE EXCEPTION 'partition interval % is shorter than a minute', step;
    END IF;
    -- One creator at a time, whichever process (sweepers, a publisher's fallback).
    PERFORM pg_advisory_xact_lock(hashtext('ripple_partitions_ensure'));
    FOR t IN SELECT * FROM ripple_partitioned_tables ORDER BY position LOOP
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
            EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                           t.parent, part, ripple_uuid7_floor(last),
                           ripple_uuid7_floor(last + step));
            INSERT INTO ripple_partitions (name, parent, lower, upper)
            VALUES (part, t.parent, last, last + step);
            last := last + step;
            made := made + 1;
        END LOOP;
    END LOOP;
    RETURN made;
END
$$;

DO $$
DECLARE
    t record;
    col record;
    idx record;
    legacy text;
    defs text[];
    sql text;
BEGIN
    FOR t IN SELECT p.parent, p.key_column, r.upper
             FROM ripple_partitioned_tables p
             JOIN ripple_partitions r ON r.parent = p.parent AND r.lower = '-infinity'
             ORDER BY p.position
    LOOP
        legacy := t.parent || '_legacy';
        -- The parent carries every index of the table, under the same names (so later
        -- migrations name them as before), except unique ones without the partition column,
        -- which a partitioned table cannot enforce: the idempotency key of events (now
        -- ripple_event_keys), a delivery's (event, subscription, replay) (now its id, derived
        -- from them) and an attempt's id (a sequence value). Those stay on the old partition.
        defs := '{}';
        FOR idx IN
            SELECT c.relname, i.indisprimary, i.indisunique,
                   pg_get_indexdef(i.indexrelid) AS def,
                   ARRAY(SELECT a.attname FROM unnest(i.indkey) k
                         JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k) AS cols
            FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
            WHERE i.indrelid = t.parent::regclass
        LOOP
            IF idx.indisunique AND NOT t.key_column = ANY (idx.cols) THEN
                CONTINUE;
            ELSIF idx.indisprimary THEN
                defs := defs || format('ALTER TABLE %I ADD CONSTRAINT %I PRIMARY KEY (%s)',
                                       t.parent, idx.relname,
                                       (SELECT string_agg(quote_ident(c), ', ')
                                        FROM unnest(idx.cols) c));
            ELSE
                defs := defs || idx.def;
            END IF;
            EXECUTE format('ALTER INDEX %I RENAME TO %I', idx.relname,
                           left(CASE WHEN starts_with(idx.relname, t.parent || '_')
                                     THEN legacy || substr(idx.relname, length(t.parent) + 1)
                                     ELSE legacy || '_' || idx.relname END, 63));
        END LOOP;
        EXECUTE format('ALTER TABLE %I RENAME TO %I', t.parent, legacy);
        EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS) '
                       'PARTITION BY RANGE (%I)', t.parent, legacy, t.key_column);
        EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', t.parent, t.parent || '_legacy_bound');
        -- Per-column statistics targets (LIKE does not copy them; new partitions copy these).
        FOR col IN SELECT attname, attstattarget FROM pg_attribute
                   WHERE attrelid = legacy::regclass AND attnum > 0
                     AND NOT attisdropped AND attstattarget >= 0
        LOOP
            EXECUTE format('ALTER TABLE %I ALTER COLUMN %I SET STATISTICS %s',
                           t.parent, col.attname, col.attstattarget);
        END LOOP;
        FOREACH sql IN ARRAY defs LOOP
            EXECUTE sql;
        END LOOP;
        -- Each parent index adopts the old table's equivalent index; nothing is built.
        EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (MINVALUE) TO (%L)',
                       t.parent, legacy, ripple_uuid7_floor(t.upper));
    END LOOP;
END
$$;

-- The attempt id sequence outlives the old table it was made for.
ALTER SEQUENCE ripple_webhook_attempts_id_seq OWNED BY ripple_webhook_attempts.id;

-- Keys of the events published while 0026 copied (with a margin for transactions that began
-- before it and committed after its snapshot).
INSERT INTO ripple_event_keys (idempotency_key, event_id, created_at)
SELECT idempotency_key, id, created_at FROM ripple_events
WHERE idempotency_key IS NOT NULL
  AND created_at >= coalesce((SELECT applied_at - interval '10 minutes' FROM ripple_migrations
                              WHERE version = 26), '-infinity')
ON CONFLICT (idempotency_key) DO NOTHING;

-- A week of daily partitions after the cutoff; the sweeper keeps them ahead from now on, at
-- RIPPLE_PARTITION_INTERVAL.
SELECT ripple_partitions_ensure(interval '1 day', max(upper) + interval '7 days')
FROM ripple_partitions;
