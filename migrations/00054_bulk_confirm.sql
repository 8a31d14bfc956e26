-- +goose Up
-- A bulk replay is created only when it starts, from a preview that wrote nothing (its keys,
-- versions and predictions travel in the start form under an HMAC). confirm_hash, the SHA-256 of
-- that confirmation, makes it single-use: a second submit of the same preview starts nothing.
ALTER TABLE replay_bulk_runs ADD COLUMN confirm_hash bytea;
CREATE UNIQUE INDEX replay_bulk_runs_confirm_idx ON replay_bulk_runs (confirm_hash);

-- +goose Down
DROP INDEX replay_bulk_runs_confirm_idx;
ALTER TABLE replay_bulk_runs DROP COLUMN confirm_hash;
