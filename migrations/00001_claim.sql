-- +goose Up
-- The claim core's tables: keys, their history, the outbox and message-consumer dedupe records.

CREATE TABLE idempotency_keys (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant              text        NOT NULL,
    operation           text        NOT NULL,
    key                 text        NOT NULL,
    key_digest          text        NOT NULL,
    fingerprint         text        NOT NULL,
    fingerprint_version smallint    NOT NULL,
    request             jsonb       NOT NULL,
    state               text        NOT NULL CHECK (state IN ('processing', 'completed', 'failed_retryable', 'failed_final')),
    version             bigint      NOT NULL DEFAULT 1,
    lease_owner         text,
    lease_token         uuid,
    lease_expires_at    timestamptz,
    attempts            integer     NOT NULL DEFAULT 1,
    downstream_key      text        NOT NULL,
    amount_minor        bigint,
    currency            text,
    response_status     integer,
    response_headers    jsonb,
    response_body       bytea,
    resource_id         text,
    error_code          text,
    error_detail        text,
    not_found_at        timestamptz,
    lookup_failures     integer     NOT NULL DEFAULT 0,
    needs_attention     boolean     NOT NULL DEFAULT false,
    legal_hold          boolean     NOT NULL DEFAULT false,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    completed_at        timestamptz,
    response_expires_at timestamptz,
    expires_at          timestamptz,
    CONSTRAINT idempotency_keys_scope_key UNIQUE (tenant, operation, key),
    CONSTRAINT idempotency_keys_lease_consistent CHECK (lease_token IS NULL OR state = 'processing')
);

-- The reclaimer: processing keys whose lease has expired, oldest expiry first.
CREATE INDEX idempotency_keys_reclaim_idx ON idempotency_keys (lease_expires_at) WHERE state = 'processing';
-- Retention: keys whose response or key period is over.
CREATE INDEX idempotency_keys_expires_idx ON idempotency_keys (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX idempotency_keys_response_expires_idx ON idempotency_keys (response_expires_at) WHERE response_body IS NOT NULL;
-- Reconciliation matches statement lines on the merchant order number (= our downstream key).
CREATE UNIQUE INDEX idempotency_keys_downstream_key_idx ON idempotency_keys (downstream_key);
-- Console: keyset listing newest first, overall and per tenant; lookups by digest.
CREATE INDEX idempotency_keys_listing_idx ON idempotency_keys (created_at DESC, id DESC);
CREATE INDEX idempotency_keys_tenant_listing_idx ON idempotency_keys (tenant, created_at DESC, id DESC);
CREATE INDEX idempotency_keys_digest_idx ON idempotency_keys (key_digest);
CREATE INDEX idempotency_keys_attention_idx ON idempotency_keys (id) WHERE needs_attention;

-- History of every transition, written in the transaction of the transition.
-- One index only, (key_id, id): it serves the key detail timeline and the purge, and every
-- claim writes two events, so a second index would tax the hot path. No foreign key either: the
-- claim package writes an event only in the statement that changes its key, and the purge
-- deletes a key's events in the statement that deletes the key (set-based, where a cascade would
-- fire a trigger per row); a foreign key's per-event parent lock showed in the claim benchmark.
CREATE TABLE key_events (
    id     bigint GENERATED ALWAYS AS IDENTITY,
    key_id bigint      NOT NULL,
    at     timestamptz NOT NULL DEFAULT now(),
    kind   text        NOT NULL,
    actor  text        NOT NULL,
    detail jsonb       NOT NULL DEFAULT '{}',
    PRIMARY KEY (key_id, id)
);

-- External actions staged in the business transaction; the daemon's relay sends them.
CREATE TABLE outbox (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key_id          bigint REFERENCES idempotency_keys (id) ON DELETE SET NULL,
    operation       text        NOT NULL,
    downstream_key  text        NOT NULL,
    payload         jsonb       NOT NULL,
    state           text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'sending', 'sent', 'failed')),
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    last_error      text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    sent_at         timestamptz,
    CONSTRAINT outbox_operation_downstream_key UNIQUE (operation, downstream_key)
);
-- The relay: due pending rows.
CREATE INDEX outbox_due_idx ON outbox (next_attempt_at) WHERE state IN ('pending', 'sending');

-- Consumers of at-least-once messages dedupe by business key.
CREATE TABLE consumed_messages (
    consumer     text        NOT NULL,
    business_key text        NOT NULL,
    message_id   text        NOT NULL,
    consumed_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, business_key)
);

-- +goose Down
DROP TABLE consumed_messages;
DROP TABLE outbox;
DROP TABLE key_events;
DROP TABLE idempotency_keys;
