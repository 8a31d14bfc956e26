-- +goose Up
-- A failed run's error as a phrase (errs.Phrase as JSON: a format and its typed arguments), so
-- the console shows it in the operator's language later; error keeps the English text, which
-- the API and the CLI show. NULL when the error carries no phrase.
ALTER TABLE recon_runs ADD COLUMN error_phrase jsonb;

-- +goose Down
ALTER TABLE recon_runs DROP COLUMN error_phrase;
