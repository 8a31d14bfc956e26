-- +goose NO TRANSACTION
-- +goose Up
-- The keys that changed over five minutes after they were created (00137: the dashboard's fold
-- counts a settled minute again when one of its keys changed). Partial on what the claim path
-- almost never does: a claim's INSERT stamps updated_at = created_at and a completion within five
-- minutes is no later change, so neither adds an entry (they only evaluate the predicate); a
-- retry, a takeover after a lease ran out or an operator's action on an older key adds one. Built
-- CONCURRENTLY (a plain build holds off every claim while it reads the table); a build that
-- failed leaves an invalid index, dropped first when the migration runs again.
DROP INDEX CONCURRENTLY IF EXISTS idempotency_keys_late_change_idx;
CREATE INDEX CONCURRENTLY idempotency_keys_late_change_idx ON idempotency_keys (updated_at)
    WHERE updated_at - created_at > interval '5 minutes';

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS idempotency_keys_late_change_idx;
