-- +goose Up
-- The consumers' dedup table counts what it dropped and knows its tenant, for the console's
-- Consumers page; the primary key (consumer, business_key) stays the dedup rule.
ALTER TABLE consumed_messages
    ADD COLUMN tenant            text        NOT NULL DEFAULT '',
    ADD COLUMN duplicates        integer     NOT NULL DEFAULT 0,
    ADD COLUMN last_duplicate_at timestamptz;

-- +goose Down
ALTER TABLE consumed_messages DROP COLUMN last_duplicate_at, DROP COLUMN duplicates, DROP COLUMN tenant;
