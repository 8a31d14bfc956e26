-- +goose Up
-- The demo's fulfillment service: one shipment per paid payment (its business write).
CREATE TABLE fulfillments (
    payment_id   text        PRIMARY KEY,
    tenant       text        NOT NULL,
    amount_minor bigint      NOT NULL,
    currency     text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE fulfillments;
