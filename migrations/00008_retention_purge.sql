-- +goose Up
-- Rows that refer to a key (outbox.key_id, replay_requests.key_id, replay_bulk_items.key_id) no
-- longer carry foreign keys to idempotency_keys. Each one fired a trigger per deleted key — three
-- SPI queries a row, a third of the purge's time — where the purge now does the same work
-- set-based, in the statement that deletes a batch of keys (claim.DeleteExpiredKeys): outbox rows
-- lose their key_id, replay requests and bulk items go with their key. The one other delete of a
-- key, claim.Release of a first claim that changed nothing, leaves any such row pointing nowhere:
-- a replay of it finds no key and fails as such.
ALTER TABLE outbox DROP CONSTRAINT outbox_key_id_fkey;
ALTER TABLE replay_requests DROP CONSTRAINT replay_requests_key_id_fkey;
ALTER TABLE replay_bulk_items DROP CONSTRAINT replay_bulk_items_key_id_fkey;
-- The purge reaches a batch's bulk items through this (replay_requests_key_idx and
-- outbox_key_id_idx serve the other two).
CREATE INDEX replay_bulk_items_key_idx ON replay_bulk_items (key_id);

-- Both passes walk an index in exactly their ORDER BY, with their cursor as an index condition,
-- so that the plan is the ordered walk whatever the statistics say right after a big delete. The
-- tombstone pass also skips keys whose key period is over (the delete pass's) by expires_at, on
-- the index rather than on each row: right after a delete pass, the index still holds an entry
-- for every key it deleted, and each would otherwise cost a heap visit.
DROP INDEX idempotency_keys_expires_idx;
CREATE INDEX idempotency_keys_expires_idx ON idempotency_keys (expires_at, id) WHERE expires_at IS NOT NULL;
DROP INDEX idempotency_keys_response_expires_idx;
CREATE INDEX idempotency_keys_response_expires_idx ON idempotency_keys (response_expires_at, id, expires_at) WHERE response_body IS NOT NULL;

-- +goose Down
DROP INDEX idempotency_keys_response_expires_idx;
CREATE INDEX idempotency_keys_response_expires_idx ON idempotency_keys (response_expires_at) WHERE response_body IS NOT NULL;
DROP INDEX idempotency_keys_expires_idx;
CREATE INDEX idempotency_keys_expires_idx ON idempotency_keys (expires_at) WHERE expires_at IS NOT NULL;
DROP INDEX replay_bulk_items_key_idx;
UPDATE outbox o SET key_id = NULL WHERE key_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM idempotency_keys k WHERE k.id = o.key_id);
DELETE FROM replay_bulk_items i WHERE NOT EXISTS (SELECT 1 FROM idempotency_keys k WHERE k.id = i.key_id);
DELETE FROM replay_requests r WHERE NOT EXISTS (SELECT 1 FROM idempotency_keys k WHERE k.id = r.key_id);
ALTER TABLE outbox ADD CONSTRAINT outbox_key_id_fkey FOREIGN KEY (key_id) REFERENCES idempotency_keys (id) ON DELETE SET NULL;
ALTER TABLE replay_requests ADD CONSTRAINT replay_requests_key_id_fkey FOREIGN KEY (key_id) REFERENCES idempotency_keys (id) ON DELETE CASCADE;
ALTER TABLE replay_bulk_items ADD CONSTRAINT replay_bulk_items_key_id_fkey FOREIGN KEY (key_id) REFERENCES idempotency_keys (id) ON DELETE CASCADE;
