-- +goose Up
-- Tenant moves between cells (issue 36), recorded in the control cell's database by
-- `idemops cells move`: one row per move, its step advanced as each step completes, so a move
-- interrupted at any point continues where it stopped when the same command runs again. At most
-- one unfinished move per tenant.
CREATE TABLE cell_moves (
    id          bigserial PRIMARY KEY,
    tenant      text NOT NULL,
    from_cell   text NOT NULL,
    to_cell     text NOT NULL,
    step        text NOT NULL,
    -- rows copied and their checksums, per table: {"idempotency_keys": 10000, …}
    counts      jsonb NOT NULL DEFAULT '{}',
    checksums   jsonb NOT NULL DEFAULT '{}',
    -- live leases the freeze revoked after its bounded wait (their keys are taken over in the
    -- target cell, with a downstream lookup first)
    revoked     integer NOT NULL DEFAULT 0,
    started_at  timestamptz NOT NULL DEFAULT now(),
    frozen_at   timestamptz,
    switched_at timestamptz,
    finished_at timestamptz,
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX cell_moves_one_per_tenant ON cell_moves (tenant) WHERE finished_at IS NULL;

-- +goose Down
DROP TABLE cell_moves;
