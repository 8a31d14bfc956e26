-- +goose Up
-- Reconciliation has tenants (issue 14 item 2). A channel account — the channel name recon jobs,
-- statements, runs and findings carry (one merchant id at one channel, e.g. "wechat-1900000109")
-- — belongs to a set of tenants; everything reconciled under it inherits that set. Matching
-- only looks at keys of those tenants, and an operator acts on the account's statements, jobs,
-- runs and findings only when their tenants cover all of it. '*' means every tenant, and only
-- operators of every tenant cover it. A channel with no row here is '*'-only: existing channels
-- stay visible to '*' operators alone until a '*' admin names their tenants.
CREATE TABLE channel_accounts (
    channel    text        PRIMARY KEY CHECK (channel <> '' AND length(channel) <= 64),
    tenants    text[]      NOT NULL CHECK (cardinality(tenants) BETWEEN 1 AND 100),
    updated_at timestamptz NOT NULL DEFAULT now(),
    updated_by text        NOT NULL
);
INSERT INTO channel_accounts (channel, tenants, updated_by)
SELECT channel, '{*}', 'migration 00016'
FROM (SELECT channel FROM recon_jobs UNION SELECT channel FROM statements UNION SELECT channel FROM recon_runs) c
WHERE channel <> '' AND length(channel) <= 64;

-- +goose Down
DROP TABLE channel_accounts;
