-- +goose Up
-- The dashboard's counts of the keys created in the last 24 hours (per operation and state, and
-- per minute of the last hour) read every index entry of the day (issue 36: 11 → 148 → 530 ms at
-- 100k / 1M / 3M keys). Now a day is counted once, minute by minute, into key_counts, and the
-- dashboard sums at most ~24 hour rows and ~120 minute rows per operation and state, and reads
-- live only the few minutes not folded yet (keys.CountByState, docs/SCALING.md).
--
-- Nothing on the claim path writes here: idemops_fold_key_counts(), which the dashboard calls
-- before it reads, counts from the listing index (00130: it carries tenant, operation and state)
-- the minutes that have settled — older than five minutes, and older than every transaction that
-- could still commit a change stamped before it — and counts again the settled minutes whose keys
-- changed since (the late changes: idempotency_keys_late_change_idx, 00138). Counted again, never
-- incremented: a fold that runs twice, or one that two sessions start, gives the same rows.
--
-- Rows: width 'minute' (bucket = the minute the keys were created in, UTC) and 'hour' (the sum of
-- an hour's minute rows, once every minute of it has settled); tenant '*' is every tenant's sum
-- (an operator of every tenant reads those), the others one tenant's (an operator of some reads
-- theirs, under row-level security like the keys). Buckets older than 25 hours are dropped.
CREATE TABLE key_counts (
    width     text        NOT NULL CHECK (width IN ('minute', 'hour')),
    tenant    text        NOT NULL,
    bucket    timestamptz NOT NULL,
    operation text        NOT NULL,
    state     text        NOT NULL,
    n         bigint      NOT NULL CHECK (n > 0),
    PRIMARY KEY (width, tenant, bucket, operation, state)
);
-- The fold's own reads and deletes go by bucket, every tenant at once.
CREATE INDEX key_counts_bucket_idx ON key_counts (width, bucket);

ALTER TABLE key_counts ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON key_counts
    USING (tenant = ANY ((SELECT COALESCE(NULLIF(current_setting('idemops.tenants', true), ''), '{}')::text[])::text[]));

-- The one row: key_counts holds every minute in [covered_from, settled_until), true as of the
-- last fold for every change stamped before changes_after.
CREATE TABLE key_count_folds (
    id            boolean     PRIMARY KEY DEFAULT true CHECK (id),
    covered_from  timestamptz NOT NULL,
    settled_until timestamptz NOT NULL,
    changes_after timestamptz NOT NULL,
    folded_at     timestamptz NOT NULL
);
INSERT INTO key_count_folds VALUES (true, 'epoch', 'epoch', 'epoch', 'epoch');

-- Runs as the tables' owner (SECURITY DEFINER): an operator limited to some tenants reads the
-- dashboard under row-level security, but a fold counts every tenant's keys. Skipped (returns
-- false) while another session folds: the reader then reads live whatever is not folded.
-- +goose StatementBegin
CREATE FUNCTION idemops_fold_key_counts() RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER
SET search_path = public, pg_temp SET TimeZone = 'UTC' AS $$
DECLARE
    f       key_count_folds%ROWTYPE;
    oldest  timestamptz;
    seen    timestamptz;
    settled timestamptz;
    keep    timestamptz := date_trunc('hour', now() - interval '25 hours');
    lo      timestamptz;
    dirty   timestamptz[];
    hours   timestamptz[];
    m       timestamptz;
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtext('idemops key counts')) THEN
        RETURN false;
    END IF;
    SELECT * INTO f FROM key_count_folds FOR UPDATE;
    -- A change this fold cannot see yet belongs to a transaction running now, and is stamped
    -- (now(): updated_at, created_at) no earlier than that transaction's start. Transactions open
    -- for over an hour are left out (a claim's lasts its statement or RunLocal's work).
    SELECT min(a.xact_start) INTO oldest FROM pg_stat_activity a
    WHERE a.datname = current_database() AND a.pid <> pg_backend_pid() AND a.backend_type = 'client backend'
      AND a.xact_start > now() - interval '1 hour';
    seen := least(now(), COALESCE(oldest, now()));
    -- A minute settles once it is five minutes older than seen: any later change of its keys is
    -- then stamped over five minutes after their creation, so it is in the late-change index.
    settled := greatest(f.settled_until, date_trunc('minute', seen - interval '5 minutes'));
    IF f.settled_until < keep THEN
        -- First fold, or none for over a day: count from 25 hours back.
        f.covered_from := keep;
        lo := keep;
    ELSE
        f.covered_from := greatest(f.covered_from, keep);
        lo := f.settled_until;
        -- Settled minutes whose keys changed since the last fold.
        dirty := ARRAY(SELECT DISTINCT date_trunc('minute', k.created_at) FROM idempotency_keys k
            WHERE k.updated_at - k.created_at > interval '5 minutes' AND k.updated_at >= f.changes_after
              AND k.created_at >= f.covered_from AND k.created_at < f.settled_until);
    END IF;
    DELETE FROM key_counts WHERE width IN ('minute', 'hour') AND bucket < keep;
    -- At most an hour of minutes per fold, oldest first, so that a fold stays well inside a
    -- page's query timeout however busy the day (the first fold of a day of 1M keys, 25 hours to
    -- count); the reads count the rest live meanwhile, and the next folds catch up.
    settled := least(settled, lo + interval '1 hour');
    IF lo < settled THEN
        DELETE FROM key_counts WHERE width = 'minute' AND bucket >= lo AND bucket < settled;
        INSERT INTO key_counts (width, tenant, bucket, operation, state, n)
        SELECT 'minute', COALESCE(k.tenant, '*'), date_trunc('minute', k.created_at), k.operation, k.state, count(*)
        FROM idempotency_keys k WHERE k.created_at >= lo AND k.created_at < settled
        GROUP BY GROUPING SETS ((date_trunc('minute', k.created_at), k.tenant, k.operation, k.state),
                                (date_trunc('minute', k.created_at), k.operation, k.state));
    END IF;
    FOREACH m IN ARRAY COALESCE(dirty, '{}') LOOP
        DELETE FROM key_counts WHERE width = 'minute' AND bucket = m;
        INSERT INTO key_counts (width, tenant, bucket, operation, state, n)
        SELECT 'minute', COALESCE(k.tenant, '*'), m, k.operation, k.state, count(*)
        FROM idempotency_keys k WHERE k.created_at >= m AND k.created_at < m + interval '1 minute'
        GROUP BY GROUPING SETS ((k.tenant, k.operation, k.state), (k.operation, k.state));
    END LOOP;
    -- Hour rows: every whole settled hour a recount touched.
    hours := ARRAY(SELECT DISTINCT date_trunc('hour', x) FROM (
            SELECT unnest(COALESCE(dirty, '{}')) AS x
            UNION ALL SELECT generate_series(lo, settled - interval '1 minute', interval '1 minute') WHERE lo < settled) t
        WHERE date_trunc('hour', x) >= f.covered_from AND date_trunc('hour', x) + interval '1 hour' <= settled);
    IF cardinality(hours) > 0 THEN
        DELETE FROM key_counts WHERE width = 'hour' AND bucket = ANY (hours);
        INSERT INTO key_counts (width, tenant, bucket, operation, state, n)
        SELECT 'hour', c.tenant, h, c.operation, c.state, sum(c.n)
        FROM unnest(hours) h JOIN key_counts c ON c.width = 'minute' AND c.bucket >= h AND c.bucket < h + interval '1 hour'
        GROUP BY h, c.tenant, c.operation, c.state;
    END IF;
    UPDATE key_count_folds SET covered_from = f.covered_from, settled_until = settled, changes_after = seen, folded_at = now();
    RETURN true;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION idemops_fold_key_counts();
DROP TABLE key_count_folds;
DROP TABLE key_counts;
