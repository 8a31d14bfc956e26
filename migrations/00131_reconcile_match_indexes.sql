-- +goose NO TRANSACTION
-- +goose Up
-- Reconciliation's matching follows the statement's lines, not the keys table (issue 36): it
-- read every key of the channel account's tenants once per statement (a hash join on
-- downstream_key, another on resource_id for the lines left unmatched, whose every unknown line
-- asks for one), 1.5 s of a statement of 94k lines against 1M keys.
--
-- The keys a statement must list (LOCAL_ONLY: completed keys of the job's operations in the bill
-- window) are a range of this index; a line's key outside that window is a probe of
-- idempotency_keys_downstream_key_idx.
--
-- Both indexes are partial on what a claim does not have yet, so a claim's INSERT adds no entry
-- to either; a completion adds one to each (it was never a HOT update: state and updated_at are
-- indexed already). Built CONCURRENTLY: a plain build holds off every claim for
-- as long as it reads the table; a build that failed leaves an invalid index, dropped first when
-- the migration runs again.
DROP INDEX CONCURRENTLY IF EXISTS idempotency_keys_completed_idx;
CREATE INDEX CONCURRENTLY idempotency_keys_completed_idx ON idempotency_keys (operation, completed_at) WHERE state = 'completed';

-- A line left without a key by its order number is looked for by its channel transaction id.
DROP INDEX CONCURRENTLY IF EXISTS idempotency_keys_resource_idx;
CREATE INDEX CONCURRENTLY idempotency_keys_resource_idx ON idempotency_keys (resource_id) WHERE resource_id IS NOT NULL;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS idempotency_keys_resource_idx;
DROP INDEX CONCURRENTLY IF EXISTS idempotency_keys_completed_idx;
