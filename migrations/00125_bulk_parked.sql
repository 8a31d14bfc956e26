-- +goose Up
-- A bulk run's parked keys (downstream said not found once, or could not answer) are checked
-- again: recheck_at is when the key's quarantine or backoff ends (NULL: nothing to re-check, or
-- the re-checks are used up), checks how often the bulk job has looked again. A run with a key
-- still to re-check waits (state 'waiting', recheck_at its earliest) instead of ending done, and
-- the bulk job takes it again then.
ALTER TABLE replay_bulk_items
    ADD COLUMN recheck_at timestamptz,
    ADD COLUMN checks     integer NOT NULL DEFAULT 0;
ALTER TABLE replay_bulk_runs ADD COLUMN recheck_at timestamptz;
ALTER TABLE replay_bulk_runs DROP CONSTRAINT replay_bulk_runs_state_check;
ALTER TABLE replay_bulk_runs ADD CONSTRAINT replay_bulk_runs_state_check
    CHECK (state IN ('previewed', 'running', 'waiting', 'done', 'cancelled', 'failed'));
-- The job's pick of waiting runs whose re-check is due.
CREATE INDEX replay_bulk_runs_waiting_idx ON replay_bulk_runs (recheck_at) WHERE state = 'waiting';

-- +goose Down
DROP INDEX replay_bulk_runs_waiting_idx;
UPDATE replay_bulk_runs SET state = 'done' WHERE state = 'waiting';
ALTER TABLE replay_bulk_runs DROP CONSTRAINT replay_bulk_runs_state_check;
ALTER TABLE replay_bulk_runs ADD CONSTRAINT replay_bulk_runs_state_check
    CHECK (state IN ('previewed', 'running', 'done', 'cancelled', 'failed'));
ALTER TABLE replay_bulk_runs DROP COLUMN recheck_at;
ALTER TABLE replay_bulk_items DROP COLUMN checks, DROP COLUMN recheck_at;
