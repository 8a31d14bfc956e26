-- +goose Up
-- The consumers' dedup table counts what it dropped and knows its tenant, for the console's
-- Consumers page; the primary key (consumer, business_key) stays the dedup rule.
ALTER TABLE consumed_messages
    ADD COLUMN tenant            text        NOT NULL DEFAULT '',
    ADD COLUMN duplicates        integer     NOT NULL DEFAULT 0,
    ADD COLUMN last_duplicate_at timestamptz;

-- The Consumers page lists the daemon's latest compensations (newest first).
CREATE INDEX key_events_daemon_at_idx ON key_events (at DESC) WHERE actor = 'daemon';
-- A business key's deliveries, for every consumer (the primary key leads with the consumer).
CREATE INDEX consumed_messages_business_key_idx ON consumed_messages (business_key);

-- +goose Down
DROP INDEX consumed_messages_business_key_idx;
DROP INDEX key_events_daemon_at_idx;
ALTER TABLE consumed_messages DROP COLUMN last_duplicate_at, DROP COLUMN duplicates, DROP COLUMN tenant;
