-- +goose Up
-- What the preview a replay request was confirmed from said it would do (replay.Prediction:
-- send, not_found_once, recorded, recorded_failed, lookup_error). A replay executes only when
-- that preview showed a send, and the prediction is checked again at the confirmation; NULL for
-- requests made before, which then never execute (they ask downstream and record what it has).
ALTER TABLE replay_requests ADD COLUMN prediction text;

-- +goose Down
ALTER TABLE replay_requests DROP COLUMN prediction;
