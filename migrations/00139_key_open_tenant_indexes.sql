-- +goose NO TRANSACTION
-- +goose Up
-- The dashboard's open-key counts for an operator of some tenants (failed retryable, outcome
-- unknown, needing attention — keys of any age): under row-level security the planner cannot
-- see how many rows the policy's tenant list keeps, takes it for a few and ANDs a bitmap of the
-- tenants' whole listing range with the state's (30,000 index entries read for 600 keys at 1M
-- keys, 41 ms; growing with the tenants' keys). With the tenant first in a partial index of the
-- few keys in that state, a count reads its tenants' entries only, from the index alone (the
-- unresolved count's columns are included), and a search page of those keys (state
-- failed_retryable, attention=1) for a few tenants walks each tenant's entries in listing order.
--
-- Partial on states the claim path rarely enters: a claim (processing) and a completion add no
-- entry; a retryable failure or a key flagged for an operator adds one. Built CONCURRENTLY; an
-- invalid leftover of a failed build is dropped first.
DROP INDEX CONCURRENTLY IF EXISTS idempotency_keys_retryable_tenant_idx;
CREATE INDEX CONCURRENTLY idempotency_keys_retryable_tenant_idx ON idempotency_keys (tenant, created_at DESC, id DESC)
    INCLUDE (held, needs_attention, retry_cleared, error_code) WHERE state = 'failed_retryable';

DROP INDEX CONCURRENTLY IF EXISTS idempotency_keys_attention_tenant_idx;
CREATE INDEX CONCURRENTLY idempotency_keys_attention_tenant_idx ON idempotency_keys (tenant, created_at DESC, id DESC) WHERE needs_attention;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS idempotency_keys_attention_tenant_idx;
DROP INDEX CONCURRENTLY IF EXISTS idempotency_keys_retryable_tenant_idx;
