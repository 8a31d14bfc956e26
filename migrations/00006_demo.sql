-- +goose Up
-- The demo payments service's business table (the sample service `idemops demo` runs).
CREATE TABLE payments (
    id                text PRIMARY KEY,
    tenant            text        NOT NULL,
    key_id            bigint,
    merchant_order_no text        NOT NULL,
    payee             text        NOT NULL,
    amount_minor      bigint      NOT NULL,
    currency          text        NOT NULL,
    status            text        NOT NULL,
    channel_txn_id    text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);
-- GET /v1/payments/{id} is tenant-scoped.
CREATE INDEX payments_tenant_idx ON payments (tenant, id);

-- +goose Down
DROP TABLE payments;
