-- +goose Up
-- The console's guarded manual replays: bulk runs over a key search and their per-key items,
-- and replay requests (one per confirmation) with their four-eyes approval.

-- A bulk replay: previewed (the keys and their predicted outcomes are fixed), then started once
-- (previewed → running is the run's one-time confirmation), then done.
CREATE TABLE replay_bulk_runs (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    operator_id  bigint      NOT NULL REFERENCES operators (id),
    operator     text        NOT NULL,
    filter       text        NOT NULL,           -- the key search, as its URL query
    reason       text,
    state        text        NOT NULL DEFAULT 'previewed' CHECK (state IN ('previewed', 'running', 'done', 'cancelled')),
    total        integer     NOT NULL,
    processed    integer     NOT NULL DEFAULT 0,
    capped       boolean     NOT NULL DEFAULT false, -- more keys matched than one batch takes
    counts       jsonb       NOT NULL DEFAULT '{}',  -- preview: keys by state and by predicted outcome
    results      jsonb       NOT NULL DEFAULT '{}',  -- run: keys by result
    created_at   timestamptz NOT NULL DEFAULT now(),
    started_at   timestamptz,
    finished_at  timestamptz,
    updated_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX replay_bulk_runs_created_idx ON replay_bulk_runs (created_at DESC);

-- A request to replay one key, made by confirming a preview. token_hash makes the confirmation
-- single-use: a second submit of the same confirmation finds this row and executes nothing.
-- Above the approval amount it waits (pending) for a second operator.
CREATE TABLE replay_requests (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key_id         bigint      NOT NULL REFERENCES idempotency_keys (id) ON DELETE CASCADE,
    tenant         text        NOT NULL,
    key_digest     text        NOT NULL,
    key_version    bigint      NOT NULL,          -- the version the preview saw; execution requires it
    token_hash     bytea       NOT NULL UNIQUE,
    requested_by   bigint      NOT NULL REFERENCES operators (id),
    requester      text        NOT NULL,
    reason         text        NOT NULL CHECK (length(reason) BETWEEN 1 AND 1000),
    amount_minor   bigint,
    currency       text,
    preview        text        NOT NULL,
    needs_approval boolean     NOT NULL,
    state          text        NOT NULL CHECK (state IN ('pending', 'approved', 'executing', 'executed', 'refused', 'failed')),
    approved_by    bigint      REFERENCES operators (id),
    approver       text,
    outcome_kind   text,
    outcome        text,
    bulk_run_id    bigint      REFERENCES replay_bulk_runs (id),
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    approved_at    timestamptz,
    finished_at    timestamptz,
    -- four eyes: nobody approves their own request, whatever the code above does
    CONSTRAINT replay_requests_four_eyes CHECK (approved_by IS NULL OR approved_by <> requested_by)
);
-- The replays page: pending approvals first, then recent requests; a key's requests.
CREATE INDEX replay_requests_pending_idx ON replay_requests (created_at DESC) WHERE state = 'pending';
CREATE INDEX replay_requests_created_idx ON replay_requests (created_at DESC, id DESC);
CREATE INDEX replay_requests_key_idx ON replay_requests (key_id, id DESC);

-- One key of a bulk run: as previewed, and what happened to it.
CREATE TABLE replay_bulk_items (
    run_id      bigint      NOT NULL REFERENCES replay_bulk_runs (id) ON DELETE CASCADE,
    seq         integer     NOT NULL,
    key_id      bigint      NOT NULL REFERENCES idempotency_keys (id) ON DELETE CASCADE,
    key_version bigint      NOT NULL,
    key_state   text        NOT NULL,
    predicted   text        NOT NULL,
    result      text,
    detail      text,
    request_id  bigint      REFERENCES replay_requests (id),
    done_at     timestamptz,
    PRIMARY KEY (run_id, seq)
);

-- +goose Down
DROP TABLE replay_bulk_items;
DROP TABLE replay_requests;
DROP TABLE replay_bulk_runs;
