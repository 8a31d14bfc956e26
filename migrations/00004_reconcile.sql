-- +goose Up
-- Reconciliation: what to reconcile (recon_jobs), imported channel statements and their lines,
-- the runs that import and match them, and the findings (discrepancies) operators resolve.

-- A scheduled reconciliation. Its timing (cron spec + zone) is mirrored into the daemon's
-- schedules; the fields here say where the statement comes from and which local keys it covers.
CREATE TABLE recon_jobs (
    id                     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name                   text        NOT NULL UNIQUE,
    channel                text        NOT NULL,
    format                 text        NOT NULL,
    -- A file path pattern with {date}, or an http(s) URL template with {date}.
    source                 text        NOT NULL,
    -- The operations whose keys this channel settles (e.g. {payment.charge}).
    operations             text[]      NOT NULL,
    -- The bill date is today (in time_zone) minus this many days.
    bill_date_offset_days  integer     NOT NULL DEFAULT 1 CHECK (bill_date_offset_days BETWEEN 0 AND 31),
    cron_spec              text        NOT NULL,
    time_zone              text        NOT NULL DEFAULT 'UTC',
    enabled                boolean     NOT NULL DEFAULT true,
    -- Keys completed this close to the end of the bill date may be booked on the next day's
    -- statement: they are not LOCAL_ONLY today.
    grace_seconds          integer     NOT NULL DEFAULT 600 CHECK (grace_seconds BETWEEN 0 AND 86400),
    -- How long a run keeps retrying a statement that is not ready yet before it fails.
    ready_deadline_seconds integer     NOT NULL DEFAULT 7200 CHECK (ready_deadline_seconds BETWEEN 0 AND 86400),
    created_at             timestamptz NOT NULL DEFAULT now(),
    updated_at             timestamptz NOT NULL DEFAULT now()
);

-- One imported channel file. The file's SHA-256 makes a re-import a no-op; another file for the
-- same channel and date is the next version.
CREATE TABLE statements (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    channel     text        NOT NULL,
    bill_date   date        NOT NULL,
    format      text        NOT NULL,
    sha256      text        NOT NULL UNIQUE,
    version     integer     NOT NULL,
    row_count   integer     NOT NULL,
    total_minor bigint      NOT NULL,
    bytes       bigint      NOT NULL,
    summary     jsonb       NOT NULL,
    importer    text        NOT NULL,
    imported_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT statements_version UNIQUE (channel, bill_date, version)
);

-- No foreign key to statements: its per-row check would double the cost of a million-row load.
-- Lines are only written by the import, in the transaction that creates their statement;
-- whoever deletes a statement deletes its lines (statement_lines_statement_idx finds them).
CREATE TABLE statement_lines (
    id                bigint GENERATED ALWAYS AS IDENTITY (CACHE 1000) PRIMARY KEY, -- a million-line load draws ids in bulk
    statement_id      bigint      NOT NULL,
    line_no           integer     NOT NULL,
    channel_txn_id    text        NOT NULL,
    merchant_order_no text        NOT NULL,
    amount_minor      bigint      NOT NULL,
    currency          text        NOT NULL,
    status            text        NOT NULL,
    occurred_at       timestamptz NOT NULL,
    raw               text        NOT NULL
);
-- Lines arrive one statement at a time, in id order, so a BRIN index finds a statement's lines
-- for the matcher and the version diff at almost no cost to the million-row load.
CREATE INDEX statement_lines_statement_idx ON statement_lines USING brin (statement_id) WITH (pages_per_range = 32);

-- The shape COPY loads into. Each import creates an UNLOGGED table LIKE this one in its own
-- transaction and drops it before commit (a rollback removes it too), so concurrent imports never
-- see each other's rows, a failed import leaves nothing behind, and no DELETE of a million staged
-- rows is needed. (A TEMP table would do the same through the session's small local buffers,
-- several times slower for a million rows.)
CREATE UNLOGGED TABLE statement_line_staging (
    line_no           integer     NOT NULL,
    channel_txn_id    text        NOT NULL,
    merchant_order_no text        NOT NULL,
    amount_minor      bigint      NOT NULL,
    currency          text        NOT NULL,
    status            text        NOT NULL,
    occurred_at       timestamptz NOT NULL,
    raw               text        NOT NULL
);

-- One reconciliation: fetch/import a statement and match it. Progress columns are updated while
-- it works, outside its import transaction, so the console shows them live.
CREATE TABLE recon_runs (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id           bigint REFERENCES recon_jobs (id) ON DELETE SET NULL,
    channel          text        NOT NULL,
    bill_date        date,
    statement_id     bigint REFERENCES statements (id) ON DELETE SET NULL,
    status           text        NOT NULL DEFAULT 'running'
                     CHECK (status IN ('running', 'waiting', 'succeeded', 'rejected', 'failed')),
    actor            text        NOT NULL,
    already_imported boolean     NOT NULL DEFAULT false,
    rows_parsed      bigint      NOT NULL DEFAULT 0,
    rows_loaded      bigint      NOT NULL DEFAULT 0,
    rows_matched     bigint      NOT NULL DEFAULT 0,
    counts           jsonb       NOT NULL DEFAULT '{}', -- findings per kind
    diff             jsonb,                             -- against the previous version
    error            text,
    started_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    finished_at      timestamptz
);
CREATE INDEX recon_runs_job_idx ON recon_runs (job_id, id DESC);
CREATE INDEX recon_runs_listing_idx ON recon_runs (id DESC);

-- Findings. A finding is identified by what it is about — channel, bill date, kind and subject
-- (the key, the channel txn id or the file) — not by the run that found it, so a re-run of the
-- same statement, or a later version of it, updates the finding instead of copying it.
CREATE TABLE discrepancies (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id            bigint      NOT NULL REFERENCES recon_runs (id) ON DELETE CASCADE, -- the run that last found it
    first_run_id      bigint      NOT NULL,
    statement_id      bigint REFERENCES statements (id) ON DELETE SET NULL,
    channel           text        NOT NULL,
    bill_date         date        NOT NULL,
    kind              text        NOT NULL CHECK (kind IN ('LOCAL_ONLY', 'CHANNEL_ONLY', 'STATUS_MISMATCH', 'AMOUNT_MISMATCH',
                                      'CURRENCY_MISMATCH', 'DUPLICATE_AT_CHANNEL', 'DUPLICATE_IN_FILE', 'CONTROL_TOTAL_MISMATCH')),
    subject           text        NOT NULL,
    -- No foreign key: retention purges resolved keys; it never purges a key with an open finding.
    key_id            bigint,
    statement_line_id bigint REFERENCES statement_lines (id) ON DELETE SET NULL,
    detail            jsonb       NOT NULL DEFAULT '{}',
    state             text        NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'resolved', 'ignored')),
    resolver          text,
    reason_code       text,
    note              text,
    resolved_at       timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT discrepancies_identity UNIQUE (channel, bill_date, kind, subject)
);
CREATE INDEX discrepancies_run_idx ON discrepancies (run_id, id);
CREATE INDEX discrepancies_open_idx ON discrepancies (id DESC) WHERE state = 'open';
-- Retention: a key referenced by an open finding is never purged.
CREATE INDEX discrepancies_open_key_idx ON discrepancies (key_id) WHERE state = 'open' AND key_id IS NOT NULL;
CREATE INDEX discrepancies_line_idx ON discrepancies (statement_line_id) WHERE statement_line_id IS NOT NULL;

-- +goose Down
DROP TABLE discrepancies;
DROP TABLE recon_runs;
DROP TABLE statement_line_staging;
DROP TABLE statement_lines;
DROP TABLE statements;
DROP TABLE recon_jobs;
