-- +goose Up
-- Failed_retryable keys whose outcome outside is unknown and that wait to be resolved
-- (claim.UnresolvedSQL): held for an operator, flagged, or with nothing settled. Retention never touches
-- them until they are resolved, and the dashboard counts them; this small partial index serves
-- both (by response_day for the day drop's re-check, and as the count's whole scan).
CREATE INDEX idempotency_keys_unresolved_idx ON idempotency_keys (response_day)
    WHERE state = 'failed_retryable' AND (held OR needs_attention
        OR (NOT retry_cleared AND error_code IS DISTINCT FROM 'downstream_not_found'));

-- +goose Down
DROP INDEX idempotency_keys_unresolved_idx;
