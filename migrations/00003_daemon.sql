-- +goose Up
-- The daemon's tables: the leader lease, the replicas' heartbeats, persisted schedules and the
-- record of every job run.

-- One row per election scope ('default'): whoever holds an unexpired lease is the leader. term
-- grows by one on every election, so a deposed leader's writes (which name its term) match
-- nothing; resigning only moves expires_at into the past, never resets term.
CREATE TABLE daemon_leader (
    scope      text        PRIMARY KEY,
    leader_id  text        NOT NULL,
    term       bigint      NOT NULL,
    elected_at timestamptz NOT NULL,
    renewed_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
);

-- Every running replica refreshes its row on each election tick; the console shows them.
CREATE TABLE daemon_replicas (
    id         text        PRIMARY KEY,
    name       text        NOT NULL,
    host       text        NOT NULL,
    pid        integer     NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    last_seen  timestamptz NOT NULL DEFAULT now(),
    is_leader  boolean     NOT NULL DEFAULT false
);

-- A schedule runs one job (by its Name) with params. Jobs registered with the daemon get a
-- schedule named after the job; other packages may add more (one per reconciliation job).
-- next_run_at is advanced in the transaction that records the run start, from the time of that
-- start: a run missed during downtime runs once, not once per missed slot.
CREATE TABLE schedules (
    name             text        PRIMARY KEY,
    job              text        NOT NULL,
    params           jsonb       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(params) = 'object'),
    spec             text        NOT NULL,
    time_zone        text        NOT NULL DEFAULT 'UTC',
    timeout_ms       bigint      NOT NULL DEFAULT 600000 CHECK (timeout_ms > 0),
    next_run_at      timestamptz NOT NULL,
    paused           boolean     NOT NULL DEFAULT false,
    run_requested_at timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);
-- The leader's poll: due schedules, earliest first.
CREATE INDEX schedules_due_idx ON schedules (next_run_at) WHERE NOT paused;

-- Every execution of a job: scheduled, requested from the console, or run from the CLI.
CREATE TABLE job_runs (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    schedule    text,
    job         text        NOT NULL,
    trigger     text        NOT NULL CHECK (trigger IN ('schedule', 'run_now', 'cli')),
    replica     text        NOT NULL,
    term        bigint,
    status      text        NOT NULL DEFAULT 'running'
                CHECK (status IN ('running', 'succeeded', 'failed', 'abandoned', 'timed_out')),
    started_at  timestamptz NOT NULL DEFAULT now(),
    deadline_at timestamptz NOT NULL,
    finished_at timestamptz,
    stats       jsonb       NOT NULL DEFAULT '{}',
    error       text,
    phase       text,
    done        bigint      NOT NULL DEFAULT 0,
    total       bigint      NOT NULL DEFAULT 0,
    progress_at timestamptz
);
-- Console: a job's runs newest first, and the last run of each schedule.
CREATE INDEX job_runs_job_idx ON job_runs (job, id DESC);
CREATE INDEX job_runs_schedule_idx ON job_runs (schedule, id DESC);
-- A new leader marks runs its predecessors left running as abandoned.
CREATE INDEX job_runs_running_idx ON job_runs (id) WHERE status = 'running';

-- +goose Down
DROP TABLE job_runs;
DROP TABLE schedules;
DROP TABLE daemon_replicas;
DROP TABLE daemon_leader;
