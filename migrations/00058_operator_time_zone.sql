-- +goose Up
-- The IANA zone the console shows an operator's times in (UTC unless they chose another).
ALTER TABLE operators ADD COLUMN time_zone text NOT NULL DEFAULT 'UTC';

-- +goose Down
ALTER TABLE operators DROP COLUMN time_zone;
