-- +goose Up
-- Failure paths that leave a way forward (httpidem Middleware routes).
-- held: the key failed where the outcome outside this database is unknown (a route with external
-- side effects and no downstream lookup answered 5xx, or crashed); its stored answer is replayed
-- until an operator releases the key or marks it final. It stays failed_retryable meanwhile.
-- retry_cleared: an operator vouched that the failed attempt left nothing outside, so the next
-- attempt executes without a downstream check. Both are constant defaults: adding them rewrites
-- no rows.
ALTER TABLE idempotency_keys
    ADD COLUMN held boolean NOT NULL DEFAULT false,
    ADD COLUMN retry_cleared boolean NOT NULL DEFAULT false;

-- +goose Down
ALTER TABLE idempotency_keys DROP COLUMN held, DROP COLUMN retry_cleared;
