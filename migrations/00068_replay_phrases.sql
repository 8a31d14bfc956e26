-- +goose Up
-- Texts stored for later pages, as phrases too (errs.Phrase as JSON, each argument with its
-- type, as recon_runs.error_phrase): what a replay request does and how it ended, a bulk item's
-- detail, a daemon job run's error (when the job's error carried a phrase). The console says
-- them in the language of the operator who reads them, not of the one who was there when they
-- were written. The text columns keep the English, which the API and the CLI show. NULL for
-- rows written before, and for a text with no phrase: the console then shows the text.
ALTER TABLE replay_requests
    ADD COLUMN preview_phrase jsonb,
    ADD COLUMN outcome_phrase jsonb;
ALTER TABLE replay_bulk_items ADD COLUMN detail_phrase jsonb;
ALTER TABLE job_runs ADD COLUMN error_phrase jsonb;

-- +goose Down
ALTER TABLE job_runs DROP COLUMN error_phrase;
ALTER TABLE replay_bulk_items DROP COLUMN detail_phrase;
ALTER TABLE replay_requests DROP COLUMN outcome_phrase, DROP COLUMN preview_phrase;
