-- +goose Up
-- The demo's local-only operation: manual adjustments of a tenant's balance, each written in the
-- one transaction that also claims and completes its idempotency key (httpidem.Local).
CREATE TABLE demo_balance_adjustments (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant       text        NOT NULL,
    key_id       bigint      NOT NULL UNIQUE,
    amount_minor bigint      NOT NULL,
    currency     text        NOT NULL,
    reason       text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE demo_balance_adjustments;
