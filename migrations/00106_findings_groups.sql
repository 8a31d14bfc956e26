-- +goose Up
-- Findings a finance team can work (issue 32): what finance searches by as columns, who a
-- finding belongs to as a column, and the counts and amounts per group kept as the rows change.

-- The amount a finding is about, in minor units of its currency: what the channel's line says
-- (a line's finding), what the key says (LOCAL_ONLY), the second charge (DUPLICATE_AT_CHANNEL),
-- the settled difference (SETTLEMENT_MISMATCH); NULL when the finding has none (a rejected file).
-- The matcher writes these fields into every finding's detail.
-- +goose StatementBegin
CREATE FUNCTION discrepancy_amount(d jsonb) RETURNS bigint LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT round(v::numeric)::bigint
    FROM (SELECT COALESCE(d->'channel_amount_minor', d->'local_amount_minor', d->'charges'->1->'amount_minor',
                          d->'difference_minor') AS v) x
    WHERE jsonb_typeof(v) = 'number'
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE FUNCTION discrepancy_currency(d jsonb) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT upper(CASE
        WHEN jsonb_typeof(d->'channel_amount_minor') = 'number' THEN COALESCE(d->>'channel_currency', d->>'currency')
        WHEN jsonb_typeof(d->'local_amount_minor') = 'number' THEN d->>'local_currency'
        WHEN jsonb_typeof(d->'charges'->1->'amount_minor') = 'number' THEN d->'charges'->1->>'currency'
        WHEN jsonb_typeof(d->'difference_minor') = 'number' THEN d->>'currency'
    END)
$$;
-- +goose StatementEnd

-- Generated from the detail, so every writer (the matcher's upsert, a rejected file's finding)
-- fills them and none can forget. Adding them rewrites the table once.
ALTER TABLE discrepancies
    ADD COLUMN merchant_order_no text GENERATED ALWAYS AS (detail->>'merchant_order_no') STORED,
    ADD COLUMN amount_minor bigint GENERATED ALWAYS AS (discrepancy_amount(detail)) STORED,
    ADD COLUMN currency text GENERATED ALWAYS AS (discrepancy_currency(detail)) STORED,
    -- Whose finding it is: a finding about a key is its key's tenant's, recorded when it is found
    -- (so it stays that tenant's after the key is purged); '*' for one whose key was gone before
    -- this column existed; NULL for a finding about the statement itself (its channel account's).
    ADD COLUMN tenant text;
UPDATE discrepancies d SET tenant = COALESCE((SELECT k.tenant FROM idempotency_keys k WHERE k.id = d.key_id), '*')
WHERE d.key_id IS NOT NULL;
-- Every writer gets it right: a finding inserted about a key without its tenant takes the key's
-- (the matcher's upsert names it; this catches any other writer).
-- +goose StatementBegin
CREATE FUNCTION discrepancy_tenant() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.tenant IS NULL AND NEW.key_id IS NOT NULL THEN
        NEW.tenant := COALESCE((SELECT k.tenant FROM idempotency_keys k WHERE k.id = NEW.key_id), '*');
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER discrepancy_tenant BEFORE INSERT ON discrepancies FOR EACH ROW EXECUTE FUNCTION discrepancy_tenant();

-- Finance searches by merchant order number (exact or by prefix); a group is opened newest
-- first; an amount range is within one currency.
CREATE INDEX discrepancies_order_no_idx ON discrepancies (merchant_order_no text_pattern_ops) WHERE merchant_order_no IS NOT NULL;
CREATE INDEX discrepancies_group_idx ON discrepancies (channel, bill_date, kind, state, id DESC);
CREATE INDEX discrepancies_amount_idx ON discrepancies (currency, amount_minor) WHERE amount_minor IS NOT NULL;

-- The findings page opens grouped by kind × channel × bill day with counts and amounts; a
-- million findings are not grouped per request. discrepancy_groups holds, per state, kind,
-- channel, bill date, owner (tenant, '' for the channel account's) and currency ('' for none),
-- how many findings there are and the sum of their amounts. Statement triggers keep it: each
-- insert, update or delete of discrepancies applies the net change of the statement's rows (its
-- transition tables), in group order, so concurrent writers lock groups in the same order.
-- A group whose count went back to 0 stays (readers skip it).
CREATE TABLE discrepancy_groups (
    state        text   NOT NULL,
    kind         text   NOT NULL,
    channel      text   NOT NULL,
    bill_date    date   NOT NULL,
    tenant       text   NOT NULL,
    currency     text   NOT NULL,
    n            bigint NOT NULL,
    amount_minor bigint NOT NULL,
    PRIMARY KEY (state, kind, channel, bill_date, tenant, currency)
);
-- The page lists the newest groups first: a window of bill dates back from the newest.
CREATE INDEX discrepancy_groups_date_idx ON discrepancy_groups (state, bill_date DESC);

-- +goose StatementBegin
CREATE FUNCTION discrepancy_groups_apply() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO discrepancy_groups AS g (state, kind, channel, bill_date, tenant, currency, n, amount_minor)
        SELECT state, kind, channel, bill_date, COALESCE(tenant, ''), COALESCE(currency, ''), count(*), COALESCE(sum(amount_minor), 0)
        FROM new_rows GROUP BY 1, 2, 3, 4, 5, 6 ORDER BY 1, 2, 3, 4, 5, 6
        ON CONFLICT (state, kind, channel, bill_date, tenant, currency)
        DO UPDATE SET n = g.n + EXCLUDED.n, amount_minor = g.amount_minor + EXCLUDED.amount_minor;
    ELSIF TG_OP = 'UPDATE' THEN
        INSERT INTO discrepancy_groups AS g (state, kind, channel, bill_date, tenant, currency, n, amount_minor)
        SELECT state, kind, channel, bill_date, tenant, currency, sum(n), sum(amount_minor)
        FROM (SELECT state, kind, channel, bill_date, COALESCE(tenant, '') AS tenant, COALESCE(currency, '') AS currency,
                     1 AS n, COALESCE(amount_minor, 0) AS amount_minor FROM new_rows
              UNION ALL
              SELECT state, kind, channel, bill_date, COALESCE(tenant, ''), COALESCE(currency, ''),
                     -1, -COALESCE(amount_minor, 0) FROM old_rows) c
        GROUP BY 1, 2, 3, 4, 5, 6 HAVING sum(n) <> 0 OR sum(amount_minor) <> 0 ORDER BY 1, 2, 3, 4, 5, 6
        ON CONFLICT (state, kind, channel, bill_date, tenant, currency)
        DO UPDATE SET n = g.n + EXCLUDED.n, amount_minor = g.amount_minor + EXCLUDED.amount_minor;
    ELSE
        INSERT INTO discrepancy_groups AS g (state, kind, channel, bill_date, tenant, currency, n, amount_minor)
        SELECT state, kind, channel, bill_date, COALESCE(tenant, ''), COALESCE(currency, ''), -count(*), -COALESCE(sum(amount_minor), 0)
        FROM old_rows GROUP BY 1, 2, 3, 4, 5, 6 ORDER BY 1, 2, 3, 4, 5, 6
        ON CONFLICT (state, kind, channel, bill_date, tenant, currency)
        DO UPDATE SET n = g.n + EXCLUDED.n, amount_minor = g.amount_minor + EXCLUDED.amount_minor;
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER discrepancy_groups_insert AFTER INSERT ON discrepancies REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION discrepancy_groups_apply();
CREATE TRIGGER discrepancy_groups_update AFTER UPDATE ON discrepancies REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION discrepancy_groups_apply();
CREATE TRIGGER discrepancy_groups_delete AFTER DELETE ON discrepancies REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION discrepancy_groups_apply();

INSERT INTO discrepancy_groups (state, kind, channel, bill_date, tenant, currency, n, amount_minor)
SELECT state, kind, channel, bill_date, COALESCE(tenant, ''), COALESCE(currency, ''), count(*), COALESCE(sum(amount_minor), 0)
FROM discrepancies GROUP BY 1, 2, 3, 4, 5, 6;

-- +goose Down
DROP TRIGGER discrepancy_groups_delete ON discrepancies;
DROP TRIGGER discrepancy_groups_update ON discrepancies;
DROP TRIGGER discrepancy_groups_insert ON discrepancies;
DROP FUNCTION discrepancy_groups_apply();
DROP TABLE discrepancy_groups;
DROP TRIGGER discrepancy_tenant ON discrepancies;
DROP FUNCTION discrepancy_tenant();
DROP INDEX discrepancies_amount_idx;
DROP INDEX discrepancies_group_idx;
DROP INDEX discrepancies_order_no_idx;
ALTER TABLE discrepancies DROP COLUMN tenant, DROP COLUMN currency, DROP COLUMN amount_minor, DROP COLUMN merchant_order_no;
DROP FUNCTION discrepancy_currency(jsonb);
DROP FUNCTION discrepancy_amount(jsonb);
