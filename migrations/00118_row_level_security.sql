-- +goose Up
-- Row-level security on every table that holds a tenant's data (issue 35 item 9): the console's
-- tenant checks are one place in Go; a bug there was a leak. Now PostgreSQL hides the rows too.
--
-- Who is subject to it: the role idemops_console (migrations.TenantRole). The console runs every
-- transaction of an operator limited to some tenants as that role, with the operator's tenants
-- in the setting idemops.tenants, both transaction-local (internal/tenantdb: set_config(…, true)
-- at the transaction's start, or in the same implicit transaction as a lone statement), so a
-- pooled connection — pgbouncer in transaction mode included — never carries them into another
-- transaction. Everything else connects as the tables' owner, which row-level security leaves
-- alone (no FORCE): services on the claim path, the daemon and operators of every tenant ("*"),
-- so their plans and costs are unchanged. The role is made by the start-up code
-- (migrations.EnsureTenantRole), not here: the owner that runs migrations need not be allowed
-- to create roles. When it exists, this migration grants it the tables; otherwise start-up does.
--
-- The policies, per table (the setting is read in a sub-select, one init plan per query, not once
-- per row, and written out rather than through a SQL helper, which the planner would inline and
-- so parse again for every plan; an absent setting is the empty set, so a statement without
-- tenants sees no tenant's row):
--   idempotency_keys (keys, their legal holds), replay_requests, consumed_messages: tenant;
--   key_events, key_answers, key_responses, replay_bulk_items: their key's (visible key);
--   replay_bulk_runs: the tenants of all its keys (none: nobody's, visible);
--   discrepancies (findings): their tenant (00106: the key's); without one, the channel
--   account's; discrepancy_groups likewise; finding_bulk_runs: their tenants; their items: the
--   run's; audit_refusals: the actor's tenants;
--   statements: the channel account's; statement_lines: their statement's;
--   audit_log: its tenants (reads); anyone may append (the chain's head is read by a definer
--   function, audit_log_head).
-- The role never runs for "*" (an operator of every tenant uses the owner), so the policies of
-- the busy tables have no "*" branch: one init plan is all they add to a plan, and every plan of
-- the console's is made afresh (custom plans), so that matters. A tenant set is covered when it
-- is not empty and all its tenants are in the setting; a channel account without a row is "*".

-- +goose StatementBegin
CREATE FUNCTION idemops_tenants() RETURNS text[] LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT COALESCE(NULLIF(current_setting('idemops.tenants', true), '')::text[], '{}'::text[])
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE FUNCTION idemops_all_tenants() RETURNS boolean LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT '*' = ANY (idemops_tenants())
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE FUNCTION idemops_covers(tenants text[]) RETURNS boolean LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT idemops_all_tenants() OR (cardinality(tenants) > 0 AND tenants <@ idemops_tenants())
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE FUNCTION idemops_channel_tenants(ch text) RETURNS text[] LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT COALESCE((SELECT tenants FROM channel_accounts WHERE channel = ch), ARRAY['*'])
$$;
-- +goose StatementEnd
-- The tenants of a bulk run's keys, read as the owner: replay_bulk_items is itself filtered by
-- row-level security, so a policy reading it could not see the items it must count against.
-- +goose StatementBegin
CREATE FUNCTION idemops_bulk_run_tenants(run bigint) RETURNS text[] LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = public, pg_temp AS $$
    SELECT COALESCE(array_agg(DISTINCT k.tenant), '{}') FROM replay_bulk_items i JOIN idempotency_keys k ON k.id = i.key_id
    WHERE i.run_id = run
$$;
-- +goose StatementEnd
-- The audit chain's newest row for an appender, whatever rows it may read.
-- +goose StatementBegin
CREATE FUNCTION audit_log_head(OUT seq bigint, OUT hash text) LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = public, pg_temp AS $$
    SELECT seq, hash FROM audit_log ORDER BY seq DESC LIMIT 1
$$;
-- +goose StatementEnd

ALTER TABLE idempotency_keys ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON idempotency_keys
    USING (tenant = ANY ((SELECT COALESCE(NULLIF(current_setting('idemops.tenants', true), ''), '{}')::text[])::text[]));

ALTER TABLE replay_requests ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON replay_requests
    USING (tenant = ANY ((SELECT COALESCE(NULLIF(current_setting('idemops.tenants', true), ''), '{}')::text[])::text[]));

ALTER TABLE consumed_messages ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON consumed_messages
    USING (tenant = ANY ((SELECT COALESCE(NULLIF(current_setting('idemops.tenants', true), ''), '{}')::text[])::text[]));

ALTER TABLE key_events ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON key_events
    USING (EXISTS (SELECT 1 FROM idempotency_keys k WHERE k.id = key_events.key_id));

ALTER TABLE key_answers ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON key_answers
    USING (EXISTS (SELECT 1 FROM idempotency_keys k WHERE k.id = key_answers.key_id));

ALTER TABLE key_responses ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON key_responses
    USING (EXISTS (SELECT 1 FROM idempotency_keys k WHERE k.id = key_responses.key_id));

ALTER TABLE replay_bulk_items ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON replay_bulk_items
    USING (EXISTS (SELECT 1 FROM idempotency_keys k WHERE k.id = replay_bulk_items.key_id));

ALTER TABLE replay_bulk_runs ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON replay_bulk_runs
    USING (idemops_bulk_run_tenants(id) <@ (SELECT COALESCE(NULLIF(current_setting('idemops.tenants', true), ''), '{}')::text[]));

ALTER TABLE statements ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON statements
    USING (idemops_covers(idemops_channel_tenants(channel)));

ALTER TABLE statement_lines ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON statement_lines
    USING (statement_id IN (SELECT s.id FROM statements s));

ALTER TABLE discrepancies ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON discrepancies
    USING (CASE WHEN tenant IS NOT NULL
        THEN tenant = ANY ((SELECT COALESCE(NULLIF(current_setting('idemops.tenants', true), ''), '{}')::text[])::text[])
        ELSE idemops_covers(idemops_channel_tenants(channel)) END);

-- The findings page's groups (00106): a group of a tenant's findings is that tenant's; one of
-- findings about a statement itself (tenant '') is its channel account's.
ALTER TABLE discrepancy_groups ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON discrepancy_groups
    USING (tenant = ANY ((SELECT COALESCE(NULLIF(current_setting('idemops.tenants', true), ''), '{}')::text[])::text[])
        OR (tenant = '' AND idemops_covers(idemops_channel_tenants(channel))));

-- The groups are a sum over every tenant's findings, and a finding's tenant is its key's: the
-- triggers that keep them run as their owner, so that an operator's change to a finding of theirs
-- updates its group's totals and a finding takes its key's tenant whoever inserts it.
ALTER FUNCTION discrepancy_groups_apply() SECURITY DEFINER SET search_path = public, pg_temp;
ALTER FUNCTION discrepancy_tenant() SECURITY DEFINER SET search_path = public, pg_temp;

-- Bulk runs over findings (00107): a run is seen by whom its findings' tenants cover (its tenants
-- are empty only inside the transaction that starts it); its items go with their run.
ALTER TABLE finding_bulk_runs ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON finding_bulk_runs
    USING (tenants <@ (SELECT COALESCE(NULLIF(current_setting('idemops.tenants', true), ''), '{}')::text[]));

ALTER TABLE finding_bulk_items ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON finding_bulk_items
    USING (EXISTS (SELECT 1 FROM finding_bulk_runs r WHERE r.id = finding_bulk_items.run_id));

-- A key's timeline is read through this view: as its reader (not its owner, who is exempt), so
-- the policies above apply to what it shows.
ALTER VIEW key_history SET (security_invoker = true);

ALTER TABLE audit_log ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows_read ON audit_log FOR SELECT
    USING ((cardinality(tenants) > 0 AND tenants <@ (SELECT COALESCE(NULLIF(current_setting('idemops.tenants', true), ''), '{}')::text[])));
CREATE POLICY anyone_appends ON audit_log FOR INSERT WITH CHECK (true);

-- Refusals counted before they are sealed into the log (00117): the actor's tenants'.
ALTER TABLE audit_refusals ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON audit_refusals
    USING (tenants <@ (SELECT COALESCE(NULLIF(current_setting('idemops.tenants', true), ''), '{}')::text[]));

-- The role's privileges, when it exists already (else migrations.EnsureTenantRole grants them):
-- the tables and sequences of this schema, those made later by this owner too.
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'idemops_console') THEN
        GRANT USAGE ON SCHEMA public TO idemops_console;
        GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO idemops_console;
        GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO idemops_console;
        ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO idemops_console;
        ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT USAGE, SELECT, UPDATE ON SEQUENCES TO idemops_console;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
ALTER VIEW key_history RESET (security_invoker);
DROP POLICY anyone_appends ON audit_log;
DROP POLICY tenant_rows_read ON audit_log;
ALTER TABLE audit_log DISABLE ROW LEVEL SECURITY;
DROP POLICY tenant_rows ON audit_refusals;
ALTER TABLE audit_refusals DISABLE ROW LEVEL SECURITY;
DROP POLICY tenant_rows ON finding_bulk_items;
ALTER TABLE finding_bulk_items DISABLE ROW LEVEL SECURITY;
DROP POLICY tenant_rows ON finding_bulk_runs;
ALTER TABLE finding_bulk_runs DISABLE ROW LEVEL SECURITY;
ALTER FUNCTION discrepancy_tenant() SECURITY INVOKER RESET search_path;
ALTER FUNCTION discrepancy_groups_apply() SECURITY INVOKER RESET search_path;
DROP POLICY tenant_rows ON discrepancy_groups;
ALTER TABLE discrepancy_groups DISABLE ROW LEVEL SECURITY;
DROP POLICY tenant_rows ON discrepancies;
ALTER TABLE discrepancies DISABLE ROW LEVEL SECURITY;
DROP POLICY tenant_rows ON statement_lines;
ALTER TABLE statement_lines DISABLE ROW LEVEL SECURITY;
DROP POLICY tenant_rows ON statements;
ALTER TABLE statements DISABLE ROW LEVEL SECURITY;
DROP POLICY tenant_rows ON replay_bulk_runs;
ALTER TABLE replay_bulk_runs DISABLE ROW LEVEL SECURITY;
DROP POLICY tenant_rows ON replay_bulk_items;
ALTER TABLE replay_bulk_items DISABLE ROW LEVEL SECURITY;
DROP POLICY tenant_rows ON key_responses;
ALTER TABLE key_responses DISABLE ROW LEVEL SECURITY;
DROP POLICY tenant_rows ON key_answers;
ALTER TABLE key_answers DISABLE ROW LEVEL SECURITY;
DROP POLICY tenant_rows ON key_events;
ALTER TABLE key_events DISABLE ROW LEVEL SECURITY;
DROP POLICY tenant_rows ON consumed_messages;
ALTER TABLE consumed_messages DISABLE ROW LEVEL SECURITY;
DROP POLICY tenant_rows ON replay_requests;
ALTER TABLE replay_requests DISABLE ROW LEVEL SECURITY;
DROP POLICY tenant_rows ON idempotency_keys;
ALTER TABLE idempotency_keys DISABLE ROW LEVEL SECURITY;
DROP FUNCTION audit_log_head();
DROP FUNCTION idemops_bulk_run_tenants(bigint);
DROP FUNCTION idemops_channel_tenants(text);
DROP FUNCTION idemops_covers(text[]);
DROP FUNCTION idemops_all_tenants();
DROP FUNCTION idemops_tenants();
