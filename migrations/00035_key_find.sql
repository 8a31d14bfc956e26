-- +goose Up
-- Find by key: the console looks a key a customer quotes up across every tenant and operation
-- the operator may see. The unique (tenant, operation, key) index cannot serve a lookup by key
-- alone, and the digest is an HMAC over tenant|operation|key, so it differs per tenant; this
-- b-tree on the key column makes the lookup an index descent instead of a scan.
CREATE INDEX idempotency_keys_key_idx ON idempotency_keys (key);

-- +goose Down
DROP INDEX idempotency_keys_key_idx;
