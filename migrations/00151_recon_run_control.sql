-- +goose Up
-- In a deployment of cells (issue 36) a recon job lives in the control cell, while its statement
-- is imported and matched in every cell holding one of its channel account's tenants, each in a
-- run of its own. Such a cell run names the run that started it (the control cell's, whose
-- job_id is the job; ids are unique across cells, so the number is unambiguous anywhere) and the
-- job's name, since the cell's own recon_jobs does not hold the job.
ALTER TABLE recon_runs ADD COLUMN control_run_id bigint, ADD COLUMN job_name text;
CREATE INDEX recon_runs_control_run_idx ON recon_runs (control_run_id) WHERE control_run_id IS NOT NULL;

-- +goose Down
DROP INDEX recon_runs_control_run_idx;
ALTER TABLE recon_runs DROP COLUMN job_name, DROP COLUMN control_run_id;
