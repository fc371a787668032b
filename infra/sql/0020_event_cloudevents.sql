-- The CloudEvents context attributes an event was ingested with (specversion, id, source, type,
-- subject, time, dataschema, datacontenttype and extensions; the data is the payload), shown in
-- the event trace. NULL for events published any other way.
ALTER TABLE ripple_events ADD COLUMN cloudevent jsonb;
