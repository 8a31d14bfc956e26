-- +goose Up
-- The demo's shipping consumer: work that spans services (it notifies the payee through paysim,
-- then records the shipment), so its dedup record is a claim key, processing → completed.
CREATE TABLE shipping_notices (
    payment_id   text        PRIMARY KEY,
    tenant       text        NOT NULL,
    notification text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE shipping_notices;
