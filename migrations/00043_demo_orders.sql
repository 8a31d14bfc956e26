-- +goose Up
-- The demo payments service's orders, moved only by channel callbacks through guarded
-- transitions (pending → paid | closed, paid → refunded), every callback's outcome, and the
-- merchant balances a paid order credits and a refund debits (version- and balance-guarded).
CREATE TABLE demo_orders (
    merchant_order_no text PRIMARY KEY,          -- the channel's order number = the downstream key
    tenant            text        NOT NULL,
    key_id            bigint,                    -- the payment key that opened the order
    payment_id        text        NOT NULL,
    amount_minor      bigint      NOT NULL,
    currency          text        NOT NULL,
    status            text        NOT NULL CHECK (status IN ('pending', 'paid', 'closed', 'refunded')),
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);
-- The console shows an order's transitions from the key page of the payment that opened it.
CREATE INDEX demo_orders_key_idx ON demo_orders (key_id);

CREATE TABLE demo_order_transitions (
    id                bigserial PRIMARY KEY,
    merchant_order_no text        NOT NULL,
    tenant            text        NOT NULL,
    event_id          text        NOT NULL,
    event_type        text        NOT NULL,
    from_status       text        NOT NULL,      -- the status the order was in when the event arrived
    to_status         text        NOT NULL,      -- the status after (= from_status unless applied)
    outcome           text        NOT NULL CHECK (outcome IN ('applied', 'duplicate', 'ignored', 'not_yet')),
    received_at       timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX demo_order_transitions_order_idx ON demo_order_transitions (merchant_order_no, id);

CREATE TABLE demo_balances (
    id            text PRIMARY KEY,              -- tenant|currency
    tenant        text   NOT NULL,
    currency      text   NOT NULL,
    balance_minor bigint NOT NULL DEFAULT 0 CHECK (balance_minor >= 0),
    version       bigint NOT NULL DEFAULT 1
);

-- +goose Down
DROP TABLE demo_balances;
DROP TABLE demo_order_transitions;
DROP TABLE demo_orders;
