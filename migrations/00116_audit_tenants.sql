-- +goose Up
-- Audit rows carry their tenants (issue 35 item 3): the tenant set of the object acted on (a
-- key's tenant, a channel account's tenants, an operator's), the actor's own for sign-ins and
-- refusals, '*' for what concerns every tenant (a retention policy). An administrator of some
-- tenants reads a row only when its tenants are within theirs, so a '*'-only row is read by
-- administrators of every tenant alone; before, rows of no tenant (operator changes, sign-ins
-- with their addresses, token creation) were shown to every administrator.
--
-- Rows written from now on are sealed with their tenants inside the chained bytes (alg
-- 'hmac-sha256+tenants'). Rows written before keep their seal, which covers the old single
-- tenant column, not this one: their tenants are filled in here from what each row names, and
-- `idemops audit verify` says they are not covered by the chain. The back-fill updates rows, so
-- the append-only trigger is switched off for it alone, inside this migration's transaction.
ALTER TABLE audit_log ADD COLUMN tenants text[];
ALTER TABLE audit_log DROP CONSTRAINT audit_log_alg_check,
    ADD CONSTRAINT audit_log_alg_check CHECK (alg IN ('sha256', 'hmac-sha256', 'hmac-sha256+tenants'));

-- The tenants of a channel account ('*' when it names none).
-- +goose StatementBegin
CREATE FUNCTION pg_temp.audit_channel_tenants(ch text) RETURNS text[] LANGUAGE sql STABLE AS $$
    SELECT COALESCE((SELECT tenants FROM channel_accounts WHERE channel = ch), ARRAY['*'])
$$;
-- +goose StatementEnd

-- The tenants of an operator by name or id (NULL when gone).
-- +goose StatementBegin
CREATE FUNCTION pg_temp.audit_operator_tenants(by_name text, by_id bigint) RETURNS text[] LANGUAGE sql STABLE AS $$
    SELECT array_agg(t.tenant ORDER BY t.tenant) FROM operators o JOIN operator_tenants t ON t.operator_id = o.id
    WHERE (by_name IS NOT NULL AND lower(o.name) = lower(by_name)) OR o.id = by_id
$$;
-- +goose StatementEnd

-- What an old row names, resolved to tenants as they are now (the object's tenants rarely
-- change; where they did, the row's old single tenant, written at the time, wins).
-- +goose StatementBegin
CREATE FUNCTION pg_temp.audit_row_tenants(a audit_log) RETURNS text[] LANGUAGE plpgsql STABLE AS $$
DECLARE
    kind text := split_part(a.target, ':', 1);
    ref  text := substr(a.target, length(split_part(a.target, ':', 1)) + 2);
    obj_id bigint;
    ts   text[];
BEGIN
    IF a.tenant <> '' AND a.tenant <> '*' THEN
        RETURN ARRAY[a.tenant];
    END IF;
    IF ref ~ '^[0-9]{1,18}$' THEN
        obj_id := ref::bigint;
    END IF;
    CASE
    WHEN a.action IN ('login', 'logout', 'operator.time_zone', 'operator.language') AND a.actor LIKE 'operator:%' THEN
        ts := pg_temp.audit_operator_tenants(substr(a.actor, 10), NULL);
    WHEN kind = 'key' THEN
        SELECT ARRAY[tenant] INTO ts FROM idempotency_keys WHERE idempotency_keys.id = obj_id;
    WHEN kind = 'replay' THEN
        SELECT ARRAY[tenant] INTO ts FROM replay_requests WHERE replay_requests.id = obj_id;
    WHEN kind = 'bulk' THEN
        SELECT array_agg(DISTINCT k.tenant ORDER BY k.tenant) INTO ts FROM replay_bulk_items i
        JOIN idempotency_keys k ON k.id = i.key_id WHERE i.run_id = obj_id;
    WHEN kind = 'operator' THEN
        ts := pg_temp.audit_operator_tenants(ref, NULL);
    WHEN kind = 'operator-id' THEN
        ts := pg_temp.audit_operator_tenants(NULL, obj_id);
    WHEN kind = 'channel' THEN
        ts := pg_temp.audit_channel_tenants(split_part(ref, '/', 1));
        IF a.action = 'reconcile.channel.set_tenants' AND a.detail ~ '^\{' THEN
            -- A change of the account's tenants concerns the tenants before and after it.
            SELECT array_agg(DISTINCT t ORDER BY t) INTO ts FROM (
                SELECT jsonb_array_elements_text(CASE jsonb_typeof(d -> 'tenants') WHEN 'array' THEN d -> 'tenants' ELSE '[]' END) AS t
                FROM (SELECT a.detail::jsonb AS d) x
                UNION SELECT jsonb_array_elements_text(CASE jsonb_typeof(d -> 'before') WHEN 'array' THEN d -> 'before' ELSE '[]' END)
                FROM (SELECT a.detail::jsonb AS d) x
                UNION SELECT unnest(ts)) u;
        END IF;
    WHEN kind = 'recon_job' THEN
        SELECT pg_temp.audit_channel_tenants(channel) INTO ts FROM recon_jobs WHERE name = ref;
    WHEN kind = 'recon_run' THEN
        SELECT pg_temp.audit_channel_tenants(channel) INTO ts FROM recon_runs WHERE recon_runs.id = obj_id;
    WHEN kind = 'schedule' AND ref LIKE 'reconcile:%' THEN
        SELECT pg_temp.audit_channel_tenants(channel) INTO ts FROM recon_jobs WHERE name = substr(ref, 11);
    WHEN kind = 'finding' THEN
        SELECT CASE WHEN k.tenant IS NOT NULL THEN ARRAY[k.tenant] WHEN d.key_id IS NOT NULL THEN ARRAY['*']
            ELSE pg_temp.audit_channel_tenants(d.channel) END INTO ts
        FROM discrepancies d LEFT JOIN idempotency_keys k ON k.id = d.key_id WHERE d.id = obj_id;
    ELSE
        ts := NULL;
    END CASE;
    IF ts IS NULL OR cardinality(ts) = 0 OR '*' = ANY(ts) THEN
        RETURN ARRAY['*'];
    END IF;
    RETURN ts;
END;
$$;
-- +goose StatementEnd

ALTER TABLE audit_log DISABLE TRIGGER audit_log_no_update_delete;
UPDATE audit_log a SET tenants = pg_temp.audit_row_tenants(a);
ALTER TABLE audit_log ENABLE TRIGGER audit_log_no_update_delete;
ALTER TABLE audit_log ALTER COLUMN tenants SET NOT NULL,
    ADD CONSTRAINT audit_log_tenants_check CHECK (cardinality(tenants) >= 1);
-- An administrator of some tenants filters by containment (tenants <@ theirs), the tenant
-- filter by membership (tenant = ANY(tenants)).
CREATE INDEX audit_log_tenants_idx ON audit_log USING gin (tenants);

-- +goose Down
DROP INDEX audit_log_tenants_idx;
ALTER TABLE audit_log DROP COLUMN tenants;
ALTER TABLE audit_log DROP CONSTRAINT audit_log_alg_check,
    ADD CONSTRAINT audit_log_alg_check CHECK (alg IN ('sha256', 'hmac-sha256'));
