-- +goose Up
-- Retention: policies per operation and state, the global floor no policy may go below, and one
-- log row per purge run. The keys themselves stay the claim package's (00001).

-- One policy per (operation, state); operation '*' covers every operation without its own.
-- Periods are whole seconds; the floor is checked in retention.SavePolicy (it is a setting, so it
-- cannot be a CHECK constraint), the ordering of the two periods here as well.
CREATE TABLE retention_policies (
    operation             text        NOT NULL CHECK (operation <> '' AND length(operation) <= 128),
    state                 text        NOT NULL CHECK (state IN ('completed', 'failed_final', 'failed_retryable')),
    keep_response_seconds bigint      NOT NULL CHECK (keep_response_seconds >= 0),
    keep_key_seconds      bigint      NOT NULL CHECK (keep_key_seconds >= keep_response_seconds),
    updated_at            timestamptz NOT NULL DEFAULT now(),
    updated_by            text        NOT NULL,
    PRIMARY KEY (operation, state)
);

-- The one settings row: the floor's three parts, and the stamp cursor (how far the purge has
-- brought keys' expiry columns in line with the policies; moved back to the start whenever a
-- policy changes, which also bumps the generation so that a run in flight cannot write its
-- older cursor over the reset).
CREATE TABLE retention_settings (
    id                        boolean     PRIMARY KEY DEFAULT true CHECK (id),
    client_retry_seconds      bigint      NOT NULL DEFAULT 86400  CHECK (client_retry_seconds >= 0),
    backfill_seconds          bigint      NOT NULL DEFAULT 259200 CHECK (backfill_seconds >= 0),
    reconciliation_lag_seconds bigint     NOT NULL DEFAULT 172800 CHECK (reconciliation_lag_seconds >= 0),
    stamp_cursor_at           timestamptz NOT NULL DEFAULT '0001-01-01 00:00:00+00',
    stamp_cursor_id           bigint      NOT NULL DEFAULT 0,
    stamp_generation          bigint      NOT NULL DEFAULT 0,
    updated_at                timestamptz NOT NULL DEFAULT now(),
    updated_by                text        NOT NULL DEFAULT 'migration'
);
INSERT INTO retention_settings DEFAULT VALUES;

-- One row per purge run (dry runs included): what it was asked, what it changed, how it ended.
CREATE TABLE purge_log (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    started_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    dry_run     boolean     NOT NULL,
    actor       text        NOT NULL,
    operation   text,
    status      text        NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'ok', 'failed', 'stopped')),
    deleted     bigint      NOT NULL DEFAULT 0,
    tombstoned  bigint      NOT NULL DEFAULT 0,
    restamped   bigint      NOT NULL DEFAULT 0,
    counts      jsonb       NOT NULL DEFAULT '{}',
    batch_size  integer     NOT NULL,
    timeouts    integer     NOT NULL DEFAULT 0,
    error       text
);
-- The console's purge history pages newest first on the primary key.

-- The stamp phase walks keys that reached (or left) a final state since its cursor. Partial on
-- state <> 'processing', so a new claim (always processing) pays nothing for it.
CREATE INDEX idempotency_keys_stamp_idx ON idempotency_keys (updated_at, id) WHERE state <> 'processing';

-- Deleting a key sets outbox.key_id to NULL (FK ON DELETE SET NULL); without this index every
-- deleted key would scan the whole outbox.
CREATE INDEX outbox_key_id_idx ON outbox (key_id) WHERE key_id IS NOT NULL;

-- +goose Down
DROP INDEX outbox_key_id_idx;
DROP INDEX idempotency_keys_stamp_idx;
DROP TABLE purge_log;
DROP TABLE retention_settings;
DROP TABLE retention_policies;
