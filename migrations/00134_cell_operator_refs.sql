-- +goose Up
-- Operators live in the control database only (issue 36, tenant cells); a replay request or a
-- bulk replay run lives in its key's cell, which has no operators of its own. Their operator ids
-- stay, as plain columns: the console that writes them has just authenticated that operator.
ALTER TABLE replay_requests DROP CONSTRAINT replay_requests_requested_by_fkey;
ALTER TABLE replay_requests DROP CONSTRAINT replay_requests_approved_by_fkey;
ALTER TABLE replay_bulk_runs DROP CONSTRAINT replay_bulk_runs_operator_id_fkey;

-- +goose Down
ALTER TABLE replay_bulk_runs ADD CONSTRAINT replay_bulk_runs_operator_id_fkey FOREIGN KEY (operator_id) REFERENCES operators (id);
ALTER TABLE replay_requests ADD CONSTRAINT replay_requests_approved_by_fkey FOREIGN KEY (approved_by) REFERENCES operators (id);
ALTER TABLE replay_requests ADD CONSTRAINT replay_requests_requested_by_fkey FOREIGN KEY (requested_by) REFERENCES operators (id);
