-- Topic schemas: each topic's payload schema versions (1, 2, ...) and its compatibility mode.
-- The fingerprint (a hash of the schema's canonical JSON) makes registering the same schema
-- again return the existing version.
CREATE TABLE ripple_topic_schemas (
    topic        text NOT NULL,
    version      integer NOT NULL CHECK (version >= 1),
    schema       jsonb NOT NULL,
    fingerprint  text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic, version),
    UNIQUE (topic, fingerprint)
);

CREATE TABLE ripple_topic_contracts (
    topic          text PRIMARY KEY,
    compatibility  text NOT NULL DEFAULT 'backward'
        CHECK (compatibility IN ('backward', 'forward', 'full', 'none', 'backward_transitive',
                                 'forward_transitive', 'full_transitive'))
);

-- The schema version each event was validated against (NULL: its topic had no schema), and the
-- same on webhook deliveries, whose body carries it as `schemaVersion`.
ALTER TABLE ripple_events ADD COLUMN schema_version integer;
ALTER TABLE ripple_webhook_deliveries ADD COLUMN schema_version integer;
