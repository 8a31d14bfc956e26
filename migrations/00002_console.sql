-- +goose Up
-- The console's tables: operators and their tenants, sessions, API tokens, the append-only audit
-- log, login throttling state, and the indexes its key search needs.

CREATE TABLE operators (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name          text        NOT NULL UNIQUE CHECK (name ~ '^[A-Za-z0-9._@-]{1,64}$'),
    password_hash text        NOT NULL,
    role          text        NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    disabled      boolean     NOT NULL DEFAULT false,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    last_login_at timestamptz
);

-- The tenants an operator may see; '*' means every tenant.
CREATE TABLE operator_tenants (
    operator_id bigint NOT NULL REFERENCES operators (id) ON DELETE CASCADE,
    tenant      text   NOT NULL,
    PRIMARY KEY (operator_id, tenant)
);

-- Sessions: the cookie holds a random id; only its SHA-256 is stored, so a database leak does
-- not hand out live sessions. csrf_token is the synchronizer token of the session's forms.
CREATE TABLE sessions (
    id_hash      bytea       PRIMARY KEY,
    operator_id  bigint      NOT NULL REFERENCES operators (id) ON DELETE CASCADE,
    csrf_token   text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_seen_at timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    ip           text        NOT NULL DEFAULT '',
    user_agent   text        NOT NULL DEFAULT ''
);
CREATE INDEX sessions_operator_idx ON sessions (operator_id);
CREATE INDEX sessions_expires_idx ON sessions (expires_at);

-- API tokens for /api/v1, stored as SHA-256 of the bearer secret.
CREATE TABLE api_tokens (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    operator_id  bigint      NOT NULL REFERENCES operators (id) ON DELETE CASCADE,
    name         text        NOT NULL,
    token_hash   bytea       NOT NULL UNIQUE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    expires_at   timestamptz,
    revoked_at   timestamptz
);

-- Login throttling: failures per user and per client address, and the lockout they caused.
CREATE TABLE login_throttle (
    scope            text        NOT NULL CHECK (scope IN ('user', 'ip')),
    subject          text        NOT NULL,
    failures         integer     NOT NULL DEFAULT 0,
    first_failure_at timestamptz NOT NULL DEFAULT now(),
    locked_until     timestamptz,
    PRIMARY KEY (scope, subject)
);

-- The audit log: append-only, one hash chain. seq is assigned without gaps under an advisory
-- lock; hash = SHA-256 over the row's fields and prev_hash, so an edited or missing row breaks
-- the chain at a row `idemops audit verify` names. detail is the exact JSON text that was hashed.
CREATE TABLE audit_log (
    seq       bigint      PRIMARY KEY,
    at        timestamptz NOT NULL,
    actor     text        NOT NULL,
    action    text        NOT NULL,
    target    text        NOT NULL DEFAULT '',
    tenant    text        NOT NULL DEFAULT '',
    ip        text        NOT NULL DEFAULT '',
    detail    text        NOT NULL DEFAULT '{}',
    prev_hash text        NOT NULL,
    hash      text        NOT NULL
);
CREATE INDEX audit_log_actor_idx ON audit_log (actor, seq DESC);
CREATE INDEX audit_log_action_idx ON audit_log (action, seq DESC);
CREATE INDEX audit_log_at_idx ON audit_log (at);

-- +goose StatementBegin
CREATE FUNCTION audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_log is append-only (% refused)', TG_OP;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER audit_log_no_update_delete BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_append_only();
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION audit_log_append_only();

-- Key search: keyset listing (created_at, id) newest first within an operation or a state, and
-- containment filters on request fields (request @> '{"field": value}').
CREATE INDEX idempotency_keys_operation_listing_idx ON idempotency_keys (operation, created_at DESC, id DESC);
CREATE INDEX idempotency_keys_state_listing_idx ON idempotency_keys (state, created_at DESC, id DESC);
CREATE INDEX idempotency_keys_request_idx ON idempotency_keys USING gin (request jsonb_path_ops);

-- +goose Down
DROP INDEX idempotency_keys_request_idx;
DROP INDEX idempotency_keys_state_listing_idx;
DROP INDEX idempotency_keys_operation_listing_idx;
DROP TABLE audit_log;
DROP FUNCTION audit_log_append_only();
DROP TABLE login_throttle;
DROP TABLE api_tokens;
DROP TABLE sessions;
DROP TABLE operator_tenants;
DROP TABLE operators;
