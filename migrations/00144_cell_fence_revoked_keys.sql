-- +goose Up
-- The keys' fence (00135, 00136) leaves a lease holder's writes to the lease: an update that keeps
-- or clears the token, or a delete of a key with one, fires no check — only its holder can write
-- that token. But a key whose lease the tenant mover revoked (cells/move.go: a new token nobody
-- holds, lease_owner 'cells-move') has no holder, so any later write of it is someone else's: an
-- operator's, a retention's, a hand-written one. Those that record a key event were refused
-- through key_events' fence (00152); one that writes no event — a release clearing the token, an
-- update keeping it, a delete — passed, and landed in the source after the copy (lost at the
-- cleanup) or in the target before the switch. The WHEN now also judges every write of a key the
-- mover revoked. One more comparison of a column the row already holds; a holder's write on the
-- claim path still fires nothing.
DROP TRIGGER idempotency_keys_fence_update ON idempotency_keys;
DROP TRIGGER idempotency_keys_fence_delete ON idempotency_keys;
CREATE TRIGGER idempotency_keys_fence_update AFTER UPDATE ON idempotency_keys
    FOR EACH ROW WHEN (OLD.lease_token IS NULL OR NEW.lease_token <> OLD.lease_token OR OLD.lease_owner = 'cells-move')
    EXECUTE FUNCTION cell_fence_check();
CREATE TRIGGER idempotency_keys_fence_delete AFTER DELETE ON idempotency_keys
    FOR EACH ROW WHEN (OLD.lease_token IS NULL OR OLD.lease_owner = 'cells-move')
    EXECUTE FUNCTION cell_fence_check();

-- +goose Down
DROP TRIGGER idempotency_keys_fence_delete ON idempotency_keys;
DROP TRIGGER idempotency_keys_fence_update ON idempotency_keys;
CREATE TRIGGER idempotency_keys_fence_update AFTER UPDATE ON idempotency_keys
    FOR EACH ROW WHEN (OLD.lease_token IS NULL OR NEW.lease_token <> OLD.lease_token)
    EXECUTE FUNCTION cell_fence_check();
CREATE TRIGGER idempotency_keys_fence_delete AFTER DELETE ON idempotency_keys
    FOR EACH ROW WHEN (OLD.lease_token IS NULL)
    EXECUTE FUNCTION cell_fence_check();
