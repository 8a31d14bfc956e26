-- +goose Up
-- Bulk resolve, ignore and recover of findings (issue 32 item 3), run as a daemon job
-- (reconcile.BulkJob, "reconcile.findings_bulk"). A run fixes its findings when it starts (the
-- open ones its filter or selection matched, within its operator's scope, up to the newest one
-- the preview saw); each item is done once, so a pass that resumes a run after a crash or a
-- stop does only what is left.
CREATE TABLE finding_bulk_runs (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    action       text        NOT NULL CHECK (action IN ('resolve', 'ignore', 'recover')),
    reason_code  text        NOT NULL,
    note         text        NOT NULL DEFAULT '',
    -- The filter as asked (JSON), and whether the findings were picked by hand from it.
    filter       jsonb       NOT NULL,
    selected     boolean     NOT NULL DEFAULT false,
    operator_id  bigint      NOT NULL,
    operator     text        NOT NULL,
    ip           text        NOT NULL DEFAULT '',
    -- Whose findings it holds (the union of their tenant sets): who may see and approve it.
    tenants      text[]      NOT NULL,
    state        text        NOT NULL CHECK (state IN ('pending_approval', 'running', 'done', 'failed', 'rejected')),
    total        bigint      NOT NULL,
    processed    bigint      NOT NULL DEFAULT 0,
    -- Per result (resolved, ignored, recovered, skipped, failed): how many.
    results      jsonb       NOT NULL DEFAULT '{}',
    -- Per currency: the sum of the findings' amounts when it started (minor units).
    amounts      jsonb       NOT NULL DEFAULT '{}',
    approver_id  bigint,
    approver     text,
    decided_at   timestamptz,
    job_run_id   bigint,
    error        text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    started_at   timestamptz,
    finished_at  timestamptz,
    updated_at   timestamptz NOT NULL DEFAULT now()
);
-- The job takes the oldest running run; the list shows the newest first.
CREATE INDEX finding_bulk_runs_running_idx ON finding_bulk_runs (id) WHERE state = 'running';

CREATE TABLE finding_bulk_items (
    run_id     bigint NOT NULL REFERENCES finding_bulk_runs (id) ON DELETE CASCADE,
    finding_id bigint NOT NULL,
    -- NULL: to do; else what happened (resolved, ignored, recovered, skipped: no longer open,
    -- failed: recover did not apply, detail says why).
    result     text,
    detail     text,
    PRIMARY KEY (run_id, finding_id)
);
CREATE INDEX finding_bulk_items_todo_idx ON finding_bulk_items (run_id, finding_id) WHERE result IS NULL;

-- +goose Down
DROP TABLE finding_bulk_items;
DROP TABLE finding_bulk_runs;
