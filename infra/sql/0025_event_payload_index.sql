-- Event search by payload (`client.list_events(where=...)`): `payload @> where` answered by an
-- index instead of testing every event of the window.

-- Built beforehand with CREATE INDEX CONCURRENTLY under this name (docs/operations.md), so that
-- the migration does not hold publishes during the build, the index is kept; an interrupted
-- concurrent build leaves an invalid one, built again here.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_index
               WHERE indexrelid = to_regclass('ripple_events_payload') AND NOT indisvalid) THEN
        DROP INDEX ripple_events_payload;
    END IF;
END
$$;

-- jsonb_path_ops: one hash per path to a leaf, smaller and faster for `@>` than the default
-- operator class (which also answers `?`, a question search never asks). The pending list
-- (fastupdate) batches the keys of many publishes into one merge, cheaper per publish than
-- direct inserts; a quarter of the default size bounds what each search scans of it until then.
CREATE INDEX IF NOT EXISTS ripple_events_payload ON ripple_events
    USING gin (payload jsonb_path_ops) WITH (fastupdate = on, gin_pending_list_limit = 1024);

-- The planner estimates `payload @>` from the column's histogram of sampled payloads; a finer
-- one tells values that are merely uncommon (walk the time index, stop at the limit) from rare
-- ones (read the few rows the index lists). Analyzed now: the next automatic ANALYZE of a
-- large table may be days away.
ALTER TABLE ripple_events ALTER COLUMN payload SET STATISTICS 1000;
ANALYZE ripple_events (payload);
