-- +goose Up
-- The fence triggers of 00135 on UPDATE and DELETE ran BEFORE the row changed: PostgreSQL then
-- locks the row's old version (a tuple lock, with its WAL record) before it evaluates WHEN, so
-- every completion of a key paid a second row lock although the WHEN skips a lease holder's
-- write — claim+complete ×1.10 at one client. AFTER triggers evaluate WHEN on the versions the
-- update already holds, lock nothing, and queue an event only for a write the fence checks; a
-- refusal there still rolls the statement back before it commits. (The insert trigger stays
-- BEFORE: an insert has no old row to lock.)
DROP TRIGGER idempotency_keys_fence_update ON idempotency_keys;
DROP TRIGGER idempotency_keys_fence_delete ON idempotency_keys;
CREATE TRIGGER idempotency_keys_fence_update AFTER UPDATE ON idempotency_keys
    FOR EACH ROW WHEN (OLD.lease_token IS NULL OR NEW.lease_token <> OLD.lease_token)
    EXECUTE FUNCTION cell_fence_check();
CREATE TRIGGER idempotency_keys_fence_delete AFTER DELETE ON idempotency_keys
    FOR EACH ROW WHEN (OLD.lease_token IS NULL) EXECUTE FUNCTION cell_fence_check();

-- +goose Down
DROP TRIGGER idempotency_keys_fence_delete ON idempotency_keys;
DROP TRIGGER idempotency_keys_fence_update ON idempotency_keys;
CREATE TRIGGER idempotency_keys_fence_update BEFORE UPDATE ON idempotency_keys
    FOR EACH ROW WHEN (OLD.lease_token IS NULL OR NEW.lease_token <> OLD.lease_token)
    EXECUTE FUNCTION cell_fence_check();
CREATE TRIGGER idempotency_keys_fence_delete BEFORE DELETE ON idempotency_keys
    FOR EACH ROW WHEN (OLD.lease_token IS NULL) EXECUTE FUNCTION cell_fence_check();
