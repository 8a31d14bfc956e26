-- +goose Up
-- A bulk replay runs as a daemon job (replay.bulk), not in the console's request: starting one
-- stores the run as running with what the job needs to act for the operator who started it
-- (their tenants and address, taken from their session then), and the job takes it.
-- job_run_id names the job_runs row working through it: a run whose job run is no longer
-- running (abandoned by a crash, a stop or a lost leadership) is taken by the next one, which
-- resumes at its first item without a result. No foreign key: job_runs rows are pruned.
-- A run whose items cannot be read ends failed, with the error.
ALTER TABLE replay_bulk_runs
    ADD COLUMN tenants    text[],
    ADD COLUMN ip         text,
    ADD COLUMN job_run_id bigint,
    ADD COLUMN error      text;
ALTER TABLE replay_bulk_runs DROP CONSTRAINT replay_bulk_runs_state_check;
ALTER TABLE replay_bulk_runs ADD CONSTRAINT replay_bulk_runs_state_check
    CHECK (state IN ('previewed', 'running', 'done', 'cancelled', 'failed'));
-- The job's pick: the running runs, oldest first.
CREATE INDEX replay_bulk_runs_running_idx ON replay_bulk_runs (id) WHERE state = 'running';

-- +goose Down
DROP INDEX replay_bulk_runs_running_idx;
UPDATE replay_bulk_runs SET state = 'cancelled' WHERE state = 'failed';
ALTER TABLE replay_bulk_runs DROP CONSTRAINT replay_bulk_runs_state_check;
ALTER TABLE replay_bulk_runs ADD CONSTRAINT replay_bulk_runs_state_check
    CHECK (state IN ('previewed', 'running', 'done', 'cancelled'));
ALTER TABLE replay_bulk_runs DROP COLUMN error, DROP COLUMN job_run_id, DROP COLUMN ip, DROP COLUMN tenants;
