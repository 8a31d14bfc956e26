-- +goose Up
-- Refusals are counted, not each written (issue 35 item 4): a viewer's 200 forbidden requests
-- wrote 200 audit rows in 2.7 s. Each refusal now bumps one row here per actor, action (the
-- route or the refused action) and minute; once the minute is over, the row is sealed into the
-- audit chain as one row with its count (audit.Log.SealRefusals) and removed from here. Only
-- counts of the current minute wait here, outside the chain.
CREATE TABLE audit_refusals (
    actor       text        NOT NULL,
    action      text        NOT NULL,
    minute      timestamptz NOT NULL,
    tenants     text[]      NOT NULL CHECK (cardinality(tenants) >= 1),
    ip          text        NOT NULL DEFAULT '',
    target      text        NOT NULL DEFAULT '',
    last_target text        NOT NULL DEFAULT '',
    reason      text        NOT NULL DEFAULT '',
    count       bigint      NOT NULL DEFAULT 1,
    first_at    timestamptz NOT NULL DEFAULT now(),
    last_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (actor, action, minute)
);
-- The sealer takes the minutes that are over, oldest first.
CREATE INDEX audit_refusals_minute_idx ON audit_refusals (minute);

-- +goose Down
DROP TABLE audit_refusals;
