-- +goose Up
-- The demo's natural-key operation: one like per user per article. The identity is this
-- table's unique constraint (claim.DomainKey), not a row in idempotency_keys, so it outlives
-- any purge of the keys table, and an unlike (DELETE) lets a later like insert again.
CREATE TABLE demo_likes (
    id         bigserial PRIMARY KEY,
    tenant     text        NOT NULL,
    article_id text        NOT NULL,
    user_id    text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT demo_likes_one_per_user UNIQUE (tenant, article_id, user_id)
);

-- +goose Down
DROP TABLE demo_likes;
