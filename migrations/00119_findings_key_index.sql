-- +goose NO TRANSACTION
-- +goose Up
-- A key's page lists the key's findings (reconcile.ListFindings with KeyID, newest first):
-- only an index of open findings had their key (discrepancies_open_key_idx), so the list of a
-- key's findings in every state read the whole findings table each time a key was shown
-- (TestScopedLists_ReadAPageNotTheTable: a sequential scan of all 24k findings for one row).
-- This index serves it: a range of one key, newest first. Built CONCURRENTLY (reconciliation
-- writes findings while it builds); a build that failed leaves an invalid index, dropped first
-- when the migration runs again.
DROP INDEX CONCURRENTLY IF EXISTS discrepancies_key_idx;
CREATE INDEX CONCURRENTLY discrepancies_key_idx ON discrepancies (key_id, id DESC) WHERE key_id IS NOT NULL;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS discrepancies_key_idx;
