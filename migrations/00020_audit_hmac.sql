-- +goose Up
-- The audit chain becomes keyed: rows written from now on are chained with HMAC-SHA-256 under a
-- key derived from the deployment's digest secret, which is not in the database, so whoever can
-- write this table cannot recompute the chain after an edit. Rows written before stay as they
-- were (alg 'sha256', the unkeyed chain) and are verified as a prefix: the first keyed row's
-- HMAC covers the last unkeyed row's hash, and an unkeyed row after a keyed one is a break.
-- Adding a column with a constant default rewrites no row, so the append-only triggers do not
-- fire; the default is then dropped so every new row names its algorithm.
ALTER TABLE audit_log ADD COLUMN alg text NOT NULL DEFAULT 'sha256'
    CONSTRAINT audit_log_alg_check CHECK (alg IN ('sha256', 'hmac-sha256'));
ALTER TABLE audit_log ALTER COLUMN alg DROP DEFAULT;

-- +goose Down
ALTER TABLE audit_log DROP COLUMN alg;
