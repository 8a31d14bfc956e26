-- +goose Up
-- One-time tokens (claim/httpidem tokens.go): issued by a service, sent back as the key of a
-- later request. Only the SHA-256 of a token is stored, so a leaked table yields no usable token.
CREATE TABLE one_time_tokens (
    token_hash text PRIMARY KEY,                -- hex SHA-256 of the token
    tenant     text        NOT NULL,
    operation  text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    used_at    timestamptz
);
-- Issue sweeps tokens long expired, a bounded batch at a time, by this index.
CREATE INDEX one_time_tokens_expires_idx ON one_time_tokens (expires_at);

-- +goose Down
DROP TABLE one_time_tokens;
