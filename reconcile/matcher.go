package reconcile

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"github.com/idemops/idemops/claim"
)

// Kind is the kind of a finding.
type Kind string

// The kinds of finding matching produces.
const (
	// LocalOnly: a key completed locally in the bill date (outside the grace window) that the
	// channel's statement does not list.
	LocalOnly Kind = "LOCAL_ONLY"
	// ChannelOnly: a successful channel line with no local key, or whose key is not completed
	// (processing or failed_retryable: a lost completion).
	ChannelOnly Kind = "CHANNEL_ONLY"
	// StatusMismatch: the channel succeeded where the key failed finally, or the channel failed
	// where the key completed. Detail "direction" says which.
	StatusMismatch Kind = "STATUS_MISMATCH"
	// AmountMismatch: both succeeded with different amounts; detail "difference_minor" is
	// channel minus local.
	AmountMismatch Kind = "AMOUNT_MISMATCH"
	// CurrencyMismatch: both succeeded in different currencies.
	CurrencyMismatch Kind = "CURRENCY_MISMATCH"
	// DuplicateAtChannel: two successful channel transactions for one key — a double charge.
	DuplicateAtChannel Kind = "DUPLICATE_AT_CHANNEL"
	// DuplicateInFile: one channel transaction listed on more than one order line of the file.
	DuplicateInFile Kind = "DUPLICATE_IN_FILE"
	// ControlTotalMismatch: the statement's rows do not add up to its own totals; it was rejected.
	ControlTotalMismatch Kind = "CONTROL_TOTAL_MISMATCH"
	// SettlementMismatch: what the statement states was settled for a day, payout or batch in
	// one currency differs from the net of its rows; detail "difference_minor" is stated minus
	// computed (see Settlement).
	SettlementMismatch Kind = "SETTLEMENT_MISMATCH"
	// FeeMismatch: a charge or refund line's fee is not what the job's FeeSchedule gives it;
	// detail "difference_minor" is the line's fee minus the expected one.
	FeeMismatch Kind = "FEE_MISMATCH"
)

// Kinds lists every kind of finding.
var Kinds = []Kind{LocalOnly, ChannelOnly, StatusMismatch, AmountMismatch, CurrencyMismatch, DuplicateAtChannel,
	DuplicateInFile, ControlTotalMismatch, SettlementMismatch, FeeMismatch}

// MatchSettings say which local keys a statement covers.
type MatchSettings struct {
	// Operations whose keys the channel settles. Empty: LOCAL_ONLY is not checked (nothing says
	// which keys the statement must list) and the txn-id fallback looks at every key.
	Operations []string
	// Location is the channel's time zone: the bill date is a day in it (default UTC).
	Location *time.Location
	// Grace: keys completed this close before the end of the bill date may be booked on the
	// next day's statement, so they are not LOCAL_ONLY today; the next day's run looks for them
	// in both days' statements.
	Grace time.Duration
	// Fees, when set, is the channel's fee schedule: a line whose fee differs is a FEE_MISMATCH.
	// (SETTLEMENT_MISMATCH is always checked where the statement states a settlement.)
	Fees *FeeSchedule
}

// MatchResult says what matching found.
type MatchResult struct {
	Lines   int64          `json:"lines"`   // order lines (success, failed) considered
	Matched int64          `json:"matched"` // of them, lines matched to a local key
	Counts  map[Kind]int64 `json:"counts"`  // findings per kind (found by this run)
	// Closed is how many open findings of the channel and date this run no longer found and
	// resolved (reason code not_found_again).
	Closed int64 `json:"closed"`
	// KeysWithoutAccount is how many of the findings are about keys that ended without saying
	// which channel account they went through (recorded before accounts were; a processing key
	// has not said yet and is not counted): those were matched by tenant and the account's
	// currencies.
	KeysWithoutAccount int64 `json:"keys_without_account"`
}

// The key states the statements compare with are claim's, asked, not written here: a charge the
// channel made agrees with a completed key; a key not settled yet (claim.State.Settled) is a
// charge the keys do not know of (CHANNEL_ONLY, recoverable); a failed_final key is a mismatch.
var (
	completed   = claim.StateCompleted.SQL()
	failedFinal = claim.StateFailedFinal.SQL()
	unsettled   = claim.SQLList(claim.StatesWhere(func(s claim.State) bool { return !s.Settled() }))
)

// The matcher works set-based in one transaction on temporary tables (dropped at commit). A
// statement of hashJoinThreshold lines or more is matched with enable_nestloop off: it was just
// imported and has no statistics, and the planner would take it for a handful of lines.
//
// Its cost follows the statement, not the keys table: it reads idempotency_keys only through
// indexes — the keys of the bill window (idempotency_keys_completed_idx, the keys the statement
// should list) and one probe per line whose key is not among them (by order number, then by txn
// id). Those probes are LATERAL subqueries with OFFSET 0 (never pulled up into a join the
// planner could hash, which would read every key), and a key of a finding is read by its id.
//
//  1. match_lines: the statement's order lines (success, failed) with their key in
//     idempotency_keys by merchant order no = downstream_key (unique index
//     idempotency_keys_downstream_key_idx), then, for lines still unmatched, by channel txn id =
//     resource_id (idempotency_keys_resource_idx).
//  2. duplicates are looked for only where they may be: the import noted (by 64-bit hashes)
//     whether any txn id or order number repeats among the order lines, and a key can also meet
//     a second line through the txn-id fallback. A statement imported before the import took
//     note is probed instead (one grouping-sets pass over match_lines). Only then are dup_txn
//     and multi built (a clean statement needs neither).
//     dup_txn: a channel txn id on more than one order line → DUPLICATE_IN_FILE; one line of
//     it (the first successful one) stays, the repeats take no further part.
//  3. multi: keys matched by more than one line. Each local record matches at most once: the
//     first successful line is its match ("primary"), the others are secondary; two successful
//     ones → DUPLICATE_AT_CHANNEL.
//  4. primary lines against their key: CHANNEL_ONLY, STATUS_MISMATCH, CURRENCY_MISMATCH,
//     AMOUNT_MISMATCH.
//  5. LOCAL_ONLY: completed keys of the job's operations whose completed_at falls in
//     [day start − grace, day end − grace) with no line of this statement; those completed
//     within the grace of the day start (either side) may have been booked the day before, so
//     a line in the previous day's latest statement clears them too.
//  6. settlements the statement states that differ from its rows (SETTLEMENT_MISMATCH, from
//     statements.summary) and, with a fee schedule, lines whose fee differs (FEE_MISMATCH, one
//     pass over the statement's charge and refund lines).
//  7. findings upserted on (channel, bill_date, kind, subject): a re-run updates, never copies.
//
// That is the full plan. A statement whose import saw no repeated txn id or order number takes
// the lean plan instead (leanMatchSQL): steps 1 and 5 in one full join of the lines with the
// window's keys that keeps only the lines that can make a finding and the keys of the window that
// no line names; steps 2 and 3 have nothing to do. A line matched through its txn id sends it
// back to the full plan.
var (
	matchLinesSQL = `
CREATE TEMP TABLE match_lines ON COMMIT DROP AS
SELECT l.id AS line_id, l.line_no, l.channel_txn_id AS txn, l.merchant_order_no AS order_no, l.amount_minor, l.currency,
       l.status, k.id AS key_id, k.state AS key_state, k.amount_minor AS key_amount, upper(k.currency) AS key_currency,
       CASE WHEN k.id IS NOT NULL THEN 'merchant_order_no' END AS matched_by, false AS repeat, false AS secondary
FROM statement_lines l
LEFT JOIN LATERAL (SELECT id, state, amount_minor, currency FROM idempotency_keys k
                   WHERE k.downstream_key = l.merchant_order_no AND ` + inScope("k", "$2", "$3") + ` OFFSET 0) k ON true
WHERE l.statement_id = $1 AND l.status IN ('success', 'failed')`

	// The lean plan, for a statement whose import saw no repeated txn id or order number: one
	// full join of its order lines with the window's keys (w: the keys of the job's operations
	// completed in the window, a range of idempotency_keys_completed_idx) keeps only what can
	// make a finding — lines without a key or disagreeing with theirs (into match_lines) and
	// keys of the window with no line (into local_only) — where the full plan writes every line
	// and reads the window a second time for LOCAL_ONLY. A line whose key is not in the window
	// (completed another day, not completed, another operation's, none) looks for it by its
	// order number (p). The condition on matched lines is the negation of "lineFindingsSQL finds
	// nothing here"; keeping a line too many only costs a row.
	leanLinesTableSQL = `
CREATE TEMP TABLE match_lines (line_id bigint, line_no integer, txn text, order_no text, amount_minor bigint, currency text,
    status text, key_id bigint, key_state text, key_amount bigint, key_currency text, matched_by text, repeat boolean, secondary boolean)
ON COMMIT DROP`
	leanLocalOnlyTableSQL = `
CREATE TEMP TABLE local_only (id bigint, downstream_key text, resource_id text, amount_minor bigint, currency text,
    completed_at timestamptz, operation text, channel_account text) ON COMMIT DROP`
	leanMatchSQL = `
WITH w AS (
    SELECT id, state, amount_minor, currency, downstream_key, resource_id, completed_at, operation, channel_account
    FROM idempotency_keys k
    WHERE ` + windowKeys("k", "$2", "$3", "$4", "$5", "$6", "$7") + `
), j AS (
    SELECT * FROM (
        SELECT l.id AS line_id, l.line_no, l.channel_txn_id, l.merchant_order_no, l.amount_minor AS line_amount,
               l.currency AS line_currency, l.status, COALESCE(w.id, p.id) AS key_id, COALESCE(w.state, p.state) AS state,
               COALESCE(w.amount_minor, p.amount_minor) AS amount_minor, COALESCE(w.currency, p.currency) AS currency,
               w.downstream_key, w.resource_id, w.completed_at, w.operation, w.channel_account
        FROM (SELECT * FROM statement_lines WHERE statement_id = $1 AND status IN ('success', 'failed')) l
        FULL JOIN w ON w.downstream_key = l.merchant_order_no
        LEFT JOIN LATERAL (SELECT id, state, amount_minor, currency FROM idempotency_keys k
                           WHERE w.id IS NULL AND l.id IS NOT NULL AND k.downstream_key = l.merchant_order_no
                             AND ` + inScope("k", "$5", "$6") + ` OFFSET 0) p ON true) lk
    WHERE (line_id IS NOT NULL AND (key_id IS NULL OR NOT (
               (status = 'success' AND state = ` + completed + ` AND (currency IS NULL OR upper(currency) = line_currency)
                AND (amount_minor IS NULL OR amount_minor = line_amount))
            OR (status = 'failed' AND state <> ` + completed + `))))
       OR line_id IS NULL
), lines AS (
    INSERT INTO match_lines
    SELECT line_id, line_no, channel_txn_id, merchant_order_no, line_amount, line_currency, status, key_id, state, amount_minor,
           upper(currency), CASE WHEN key_id IS NOT NULL THEN 'merchant_order_no' END, false, false
    FROM j WHERE line_id IS NOT NULL
)
INSERT INTO local_only SELECT key_id, downstream_key, resource_id, amount_minor, currency, completed_at, operation, channel_account
FROM j WHERE line_id IS NULL`

	// Lines left without a key look for it by txn id, one probe of idempotency_keys_resource_idx
	// each.
	matchByTxnSQL = `
UPDATE match_lines m SET key_id = k.id, key_state = k.state, key_amount = k.amount_minor, key_currency = upper(k.currency),
       matched_by = 'channel_txn_id'
FROM (SELECT u.line_id, k.* FROM match_lines u
      CROSS JOIN LATERAL (SELECT id, state, amount_minor, currency FROM idempotency_keys k
                          WHERE k.resource_id = u.txn AND ` + inScope("k", "$2", "$3") + `
                            AND (cardinality($1::text[]) = 0 OR k.operation = ANY($1::text[])) OFFSET 0) k
      WHERE u.key_id IS NULL AND u.txn <> '') k
WHERE m.line_id = k.line_id`

	// One pass over match_lines says whether any txn id or key appears on more than one line;
	// only then do the exact statements below run (a clean statement has neither). The key
	// count includes repeats of a txn id: it may only say "maybe".
	duplicateProbeSQL = `
SELECT count(*) FILTER (WHERE g = 1) > 0, count(*) FILTER (WHERE g = 2) > 0 FROM (
    SELECT GROUPING(txn, key_id) AS g FROM match_lines
    GROUP BY GROUPING SETS ((txn), (key_id))
    HAVING count(*) > 1 AND (GROUPING(txn) = 1 OR txn <> '') AND (GROUPING(key_id) = 1 OR key_id IS NOT NULL)) d`

	dupTxnSQL = `
CREATE TEMP TABLE dup_txn ON COMMIT DROP AS
SELECT txn, array_agg(line_id ORDER BY (status = 'success') DESC, line_no) AS line_ids, array_agg(line_no ORDER BY line_no) AS line_nos
FROM match_lines WHERE txn <> '' AND txn IN (SELECT txn FROM match_lines WHERE txn <> '' GROUP BY txn HAVING count(*) > 1)
GROUP BY txn`

	markRepeatsSQL = `
UPDATE match_lines m SET repeat = true
FROM (SELECT unnest(line_ids[2:]) AS line_id FROM dup_txn) d WHERE m.line_id = d.line_id`

	multiSQL = `
CREATE TEMP TABLE multi ON COMMIT DROP AS
SELECT m.key_id,
       (array_agg(m.line_id ORDER BY (m.status = 'success') DESC, m.line_no))[1] AS primary_line,
       count(*) FILTER (WHERE m.status = 'success') AS successes,
       (array_agg(m.line_id ORDER BY m.line_no) FILTER (WHERE m.status = 'success'))[2] AS second_success,
       jsonb_agg(jsonb_build_object('line', m.line_no, 'channel_txn_id', m.txn, 'amount_minor', m.amount_minor,
                 'currency', m.currency) ORDER BY m.line_no) FILTER (WHERE m.status = 'success') AS charges,
       min(m.order_no) AS order_no
FROM match_lines m
WHERE NOT m.repeat AND m.key_id IN (SELECT key_id FROM match_lines WHERE key_id IS NOT NULL AND NOT repeat
                                    GROUP BY key_id HAVING count(*) > 1)
GROUP BY m.key_id`

	markSecondarySQL = `
UPDATE match_lines m SET secondary = true
FROM multi WHERE m.key_id = multi.key_id AND m.line_id <> multi.primary_line AND NOT m.repeat`

	// When the probe finds no duplicates, the finding statements below read empty tables.
	emptyDupTxnSQL = `
CREATE TEMP TABLE IF NOT EXISTS dup_txn ON COMMIT DROP AS SELECT NULL::text AS txn, NULL::bigint[] AS line_ids, NULL::int[] AS line_nos LIMIT 0`
	emptyMultiSQL = `
CREATE TEMP TABLE IF NOT EXISTS multi ON COMMIT DROP AS SELECT NULL::bigint AS key_id, NULL::bigint AS primary_line, 0::bigint AS successes,
    NULL::bigint AS second_success, NULL::jsonb AS charges, NULL::text AS order_no LIMIT 0`

	findingsTableSQL = `
CREATE TEMP TABLE found (kind text NOT NULL, subject text NOT NULL, key_id bigint, line_id bigint, detail jsonb NOT NULL)
ON COMMIT DROP`

	dupInFileFindingsSQL = `
INSERT INTO found (kind, subject, key_id, line_id, detail)
SELECT 'DUPLICATE_IN_FILE', 'txn:' || d.txn, m.key_id, d.line_ids[2],
       jsonb_build_object('channel_txn_id', d.txn, 'merchant_order_no', m.order_no, 'lines', to_jsonb(d.line_nos),
                          'count', cardinality(d.line_nos), 'channel_amount_minor', m.amount_minor, 'channel_currency', m.currency)
FROM dup_txn d JOIN match_lines m ON m.line_id = d.line_ids[1]`

	dupAtChannelFindingsSQL = `
INSERT INTO found (kind, subject, key_id, line_id, detail)
SELECT 'DUPLICATE_AT_CHANNEL', 'key:' || key_id, key_id, second_success,
       jsonb_build_object('merchant_order_no', order_no, 'successes', successes, 'charges', charges)
FROM multi WHERE successes > 1`

	lineFindingsSQL = `
INSERT INTO found (kind, subject, key_id, line_id, detail)
SELECT c.kind,
       CASE WHEN m.key_id IS NOT NULL THEN 'key:' || m.key_id WHEN m.txn <> '' THEN 'txn:' || m.txn ELSE 'order:' || m.order_no END,
       m.key_id, m.line_id,
       jsonb_build_object('line', m.line_no, 'channel_txn_id', m.txn, 'merchant_order_no', m.order_no,
           'channel_status', m.status, 'channel_amount_minor', m.amount_minor, 'channel_currency', m.currency,
           'matched_by', m.matched_by, 'local_state', m.key_state) ||
       CASE c.kind
           WHEN 'CHANNEL_ONLY' THEN jsonb_build_object('reason', CASE WHEN m.key_id IS NULL THEN 'no local key' ELSE 'local key not completed' END)
           WHEN 'STATUS_MISMATCH' THEN jsonb_build_object('direction', CASE WHEN m.status = 'success'
               THEN 'channel_success_local_failed' ELSE 'channel_failed_local_completed' END)
           WHEN 'CURRENCY_MISMATCH' THEN jsonb_build_object('local_currency', m.key_currency)
           WHEN 'AMOUNT_MISMATCH' THEN jsonb_build_object('local_amount_minor', m.key_amount,
               'difference_minor', m.amount_minor - m.key_amount, 'currency', m.currency)
       END
FROM match_lines m
CROSS JOIN LATERAL (SELECT CASE
    WHEN m.key_id IS NULL THEN CASE WHEN m.status = 'success' THEN 'CHANNEL_ONLY' END
    WHEN m.status = 'success' AND m.key_state IN ` + unsettled + ` THEN 'CHANNEL_ONLY'
    WHEN m.status = 'success' AND m.key_state = ` + failedFinal + ` THEN 'STATUS_MISMATCH'
    WHEN m.status = 'failed' AND m.key_state = ` + completed + ` THEN 'STATUS_MISMATCH'
    WHEN m.status = 'success' AND m.key_currency IS NOT NULL AND m.key_currency <> m.currency THEN 'CURRENCY_MISMATCH'
    WHEN m.status = 'success' AND m.key_amount IS NOT NULL AND m.key_amount <> m.amount_minor THEN 'AMOUNT_MISMATCH'
END AS kind) c
WHERE c.kind IS NOT NULL AND NOT m.repeat AND NOT m.secondary`

	// Keys completed in [$2, $3) of the job's operations that no line matched: a range of
	// idempotency_keys_completed_idx.
	localOnlySQL = `
CREATE TEMP TABLE local_only ON COMMIT DROP AS
SELECT k.id, k.downstream_key, k.resource_id, k.amount_minor, k.currency, k.completed_at, k.operation, k.channel_account
FROM idempotency_keys k
WHERE ` + windowKeys("k", "$1", "$2", "$3", "$4", "$5", "$6") + `
  AND NOT EXISTS (SELECT 1 FROM match_lines m WHERE m.key_id = k.id)`

	// Keys completed within the grace of the day start (before it, or after it by a clock's
	// skew), found in the previous day's latest statement ($2), were booked there. Two equality
	// joins (hashable), not one OR.
	clearEarlyByOrderSQL = `
DELETE FROM local_only o USING statement_lines p
WHERE o.completed_at < $1 AND p.statement_id = $2 AND p.merchant_order_no = o.downstream_key`
	clearEarlyByTxnSQL = `
DELETE FROM local_only o USING statement_lines p
WHERE o.completed_at < $1 AND p.statement_id = $2 AND p.channel_txn_id <> '' AND p.channel_txn_id = o.resource_id`

	localOnlyFindingsSQL = `
INSERT INTO found (kind, subject, key_id, line_id, detail)
SELECT 'LOCAL_ONLY', 'key:' || id, id, NULL,
       jsonb_build_object('merchant_order_no', downstream_key, 'operation', operation, 'local_amount_minor', amount_minor,
                          'local_currency', currency, 'completed_at', completed_at, 'channel_account', channel_account)
FROM local_only`

	// A finding about a key is its tenant's, recorded with it (discrepancies.tenant): read by the
	// key's id, a subquery (a join the planner could hash would read every key).
	upsertFindingsSQL = `
INSERT INTO discrepancies (run_id, first_run_id, statement_id, channel, bill_date, kind, subject, key_id, statement_line_id, detail, tenant)
SELECT DISTINCT ON (f.kind, f.subject) $1::bigint, $1::bigint, $2::bigint, $3, $4::date, f.kind, f.subject, f.key_id, f.line_id,
       f.detail, (SELECT k.tenant FROM idempotency_keys k WHERE k.id = f.key_id)
FROM found f ORDER BY f.kind, f.subject, f.line_id
ON CONFLICT (channel, bill_date, kind, subject) DO UPDATE
SET run_id = EXCLUDED.run_id, statement_id = EXCLUDED.statement_id, key_id = EXCLUDED.key_id,
    statement_line_id = EXCLUDED.statement_line_id, detail = EXCLUDED.detail, tenant = EXCLUDED.tenant, updated_at = now()`

	// Open findings of this channel and date that the run did not find again are closed: the
	// problem went away (a recovered key, a corrected statement version).
	closeGoneSQL = `
UPDATE discrepancies SET state = 'resolved', resolver = 'reconcile', reason_code = 'not_found_again',
    note = 'not found again by run ' || $1::bigint, resolved_at = now(), updated_at = now()
WHERE channel = $2 AND bill_date = $3::date AND state = 'open' AND run_id <> $1::bigint`
)

// inScope is the condition on a key k that matching may read it: a key of the channel account's
// tenants (the parameter named by tenants; NULL for an account of every tenant, which the planner
// folds away) recorded at the account (the parameter named by account) or at none.
func inScope(k, tenants, account string) string {
	return `(` + tenants + `::text[] IS NULL OR ` + k + `.tenant = ANY(` + tenants + `::text[])) AND (` + k +
		`.channel_account IS NULL OR ` + k + `.channel_account = ` + account + `)`
}

// windowKeys is the condition on a key k that the statement should list it: in scope, completed
// in [from, to) under one of the operations, and recorded at the account or in one of its
// currencies. Its range is one of idempotency_keys_completed_idx (operation, completed_at) WHERE
// state = 'completed'.
func windowKeys(k, operations, from, to, tenants, account, currencies string) string {
	return k + `.state = ` + completed + ` AND ` + k + `.operation = ANY(` + operations + `::text[]) AND ` + k + `.completed_at >= ` + from +
		` AND ` + k + `.completed_at < ` + to + ` AND ` + inScope(k, tenants, account) + ` AND ` + accountCurrencies(k, currencies)
}

// accountCurrencies is the condition on a key k that the statement should list it by currency:
// a key recorded at the account (the scope already keeps only those and keys recorded nowhere)
// whatever its currency; a key recorded nowhere (before accounts were recorded) only in one of
// the account's currencies (the parameter named by param; empty: any).
func accountCurrencies(k, param string) string {
	return `(` + k + `.channel_account IS NOT NULL OR cardinality(` + param + `::text[]) = 0 OR upper(` + k + `.currency) = ANY(` + param + `::text[]))`
}

// keysWithoutAccountSQL counts the findings of this run about keys that went past processing
// without recording a channel account (before accounts were recorded): matched by tenant (and
// the account's currencies). A processing key has not said yet; it is not counted. Each key is
// read by its id (OFFSET 0 keeps the EXISTS a probe, never a semi-join hashed over every key).
var keysWithoutAccountSQL = `SELECT count(DISTINCT f.subject) FROM found f
WHERE EXISTS (SELECT 1 FROM idempotency_keys k WHERE k.id = f.key_id AND k.channel_account IS NULL
              AND k.state <> ` + claim.StateProcessing.SQL() + ` OFFSET 0)`

// Match matches one imported statement against idempotency_keys for run runID and upserts the
// findings. A re-run of the same statement finds the same findings (updated, not copied); open
// findings of the channel and date that are no longer found are closed when the statement is
// the latest version. Errors: ErrNotFound (statement), database errors.
func (r *Reconciler) Match(ctx context.Context, runID, statementID int64, ms MatchSettings) (*MatchResult, error) {
	if ms.Location == nil {
		ms.Location = time.UTC
	}
	if ms.Operations == nil {
		ms.Operations = []string{}
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.MatchTimeout)
	defer cancel()
	sqlDB, err := r.db.DB()
	if err != nil {
		return nil, err
	}
	var channel, billDate string
	var latest bool
	var rowCount int64
	var repeatedTxns, repeatedOrders sql.NullBool
	var orderLines sql.NullInt64
	err = sqlDB.QueryRowContext(ctx, `SELECT channel, to_char(bill_date, 'YYYY-MM-DD'), row_count,
		version = (SELECT max(version) FROM statements o WHERE o.channel = s.channel AND o.bill_date = s.bill_date),
		repeated_txn_ids, repeated_order_nos, order_lines
		FROM statements s WHERE id = $1`, statementID).Scan(&channel, &billDate, &rowCount, &latest, &repeatedTxns, &repeatedOrders, &orderLines)
	if err == sql.ErrNoRows {
		return nil, fmt.Errorf("statement %d: %w", statementID, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("match: statement %d: %w", statementID, err)
	}
	// A run's findings carry the run's channel account: a statement of another account is not
	// this run's to match (its findings would be labelled and counted under the wrong account).
	// The statement can list no charge made after it was read: the run started before the
	// fetch, and a statement imported earlier (matched again) was read before its import.
	var runChannel string
	var readBy time.Time
	if err := sqlDB.QueryRowContext(ctx, `SELECT r.channel, least(r.started_at, s.imported_at)
		FROM recon_runs r, statements s WHERE r.id = $1 AND s.id = $2`, runID, statementID).Scan(&runChannel, &readBy); err != nil {
		return nil, fmt.Errorf("match: run %d: %w", runID, err)
	}
	if runChannel != channel {
		return nil, fmt.Errorf("match: statement %d is channel account %s's, run %d is %s's: %w", statementID, channel, runID,
			runChannel, ErrInvalid)
	}
	// Matching reads only keys of the channel account's tenants (scope, below): a line naming
	// another tenant's key is a line without a key, and no other tenant's key is LOCAL_ONLY here.
	// Of those, only the keys whose downstream call went through this account, and the keys that
	// do not say (recorded before accounts were), those in the account's currencies for LOCAL_ONLY.
	account, err := r.channelAccount(ctx, channel)
	if err != nil {
		return nil, fmt.Errorf("match: %w", err)
	}
	tenants, currencies := account.Tenants, textArray(account.Settings.Currencies)
	allTenants := slices.Contains(tenants, AllTenants)
	day, _ := time.ParseInLocation(time.DateOnly, billDate, ms.Location)
	dayStart, dayEnd := day, day.AddDate(0, 0, 1)

	tx, err := sqlDB.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("match: begin: %w", err)
	}
	defer tx.Rollback()
	res := &MatchResult{Counts: map[Kind]int64{}}
	exec := func(what, q string, args ...any) (int64, error) {
		out, err := tx.ExecContext(ctx, q, args...)
		if err != nil {
			return 0, fmt.Errorf("match statement %d: %s: %w", statementID, what, err)
		}
		n, _ := out.RowsAffected()
		return n, nil
	}
	// Hash joins and aggregates over a million lines want memory, not temp files. No parallel
	// workers: on this project's reference machine (2 cores) a parallel hash join of a million
	// lines took twice as long as a serial one, and a reconciliation must not take every core
	// from the claims running beside it. No JIT: compiling costs more than the few expressions
	// per row it would speed up.
	if _, err := exec("settings", `SELECT set_config('work_mem', '256MB', true),
		set_config('max_parallel_workers_per_gather', '0', true), set_config('jit', 'off', true)`); err != nil {
		return nil, err
	}
	// A statement just imported has no statistics yet (an ANALYZE of statement_lines would cost
	// the import a sampling pass): the planner takes its lines for a handful and loops over them.
	// For a large statement, hash joins of the lines, the window's keys and the temporary tables
	// are the plan; the probes of idempotency_keys by index are LATERAL subqueries, which stay
	// loops.
	if rowCount >= hashJoinThreshold {
		if _, err := exec("settings", `SET LOCAL enable_nestloop = off`); err != nil {
			return nil, err
		}
	}
	// The statements that read idempotency_keys keep to the account's keys (inScope): scope is
	// NULL for an account of every tenant (the planner folds the condition away) and the
	// account's tenants otherwise.
	var scope any
	if !allTenants {
		scope = textArray(tenants)
	}
	from, to := dayStart.Add(-ms.Grace), dayEnd.Add(-ms.Grace)
	// A key completed after the statement was read is no LOCAL_ONLY of it (a statement of a day
	// still running, read at noon, lists nothing charged in the afternoon): the next run's
	// statement says whether the channel has it.
	if readBy.Before(to) {
		to = readBy
	}
	// The lean plan when the import saw no repeats; the full one otherwise, or when a line
	// matched a key through its txn id (that key may also be the key of a line the lean plan
	// did not keep). At most two rounds.
	lean := repeatedTxns.Valid && repeatedOrders.Valid && orderLines.Valid && !repeatedTxns.Bool && !repeatedOrders.Bool
	var byTxn int64
	for round := 0; round < 2; round++ {
		if lean {
			if _, err := exec("lean tables", leanLinesTableSQL); err != nil {
				return nil, err
			}
			if _, err := exec("lean tables", leanLocalOnlyTableSQL); err != nil {
				return nil, err
			}
			if _, err := exec("lines", leanMatchSQL, statementID, ms.Operations, from, to, scope, channel, currencies); err != nil {
				return nil, err
			}
		} else if res.Lines, err = exec("lines", matchLinesSQL, statementID, scope, channel); err != nil {
			return nil, err
		}
		if rowCount < hashJoinThreshold { // larger ones are planned with enable_nestloop off
			if _, err := exec("analyze", `ANALYZE match_lines`); err != nil {
				return nil, err
			}
		}
		// The fallback probes idempotency_keys once per line left without a key: only when some
		// line is left to match by its txn id.
		var unmatched bool
		if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM match_lines WHERE key_id IS NULL AND txn <> '')`).
			Scan(&unmatched); err != nil {
			return nil, fmt.Errorf("match statement %d: unmatched lines: %w", statementID, err)
		}
		if unmatched {
			if byTxn, err = exec("match by txn id", matchByTxnSQL, ms.Operations, scope, channel); err != nil {
				return nil, err
			}
		}
		if !lean || byTxn == 0 {
			break
		}
		if _, err := exec("full plan", `DROP TABLE match_lines, local_only`); err != nil {
			return nil, err
		}
		lean = false
	}
	// What the import saw says whether any txn id or order number repeats; a key can also meet
	// two lines when one matched it by txn id. Only a statement imported before the import
	// looked (NULL) needs the probe, a pass over every line.
	maybeDupTxn, maybeMulti := repeatedTxns.Bool, repeatedOrders.Bool || byTxn > 0
	if !repeatedTxns.Valid || !repeatedOrders.Valid {
		if err := tx.QueryRowContext(ctx, duplicateProbeSQL).Scan(&maybeDupTxn, &maybeMulti); err != nil {
			return nil, fmt.Errorf("match statement %d: duplicates: %w", statementID, err)
		}
	}
	if err := markDuplicates(exec, maybeDupTxn, maybeMulti); err != nil {
		return nil, err
	}
	steps := []struct{ what, q string }{
		{"findings table", findingsTableSQL},
		{"duplicate tables", emptyDupTxnSQL},
		{"duplicate tables", emptyMultiSQL},
		{"duplicate in file findings", dupInFileFindingsSQL},
		{"duplicate at channel findings", dupAtChannelFindingsSQL},
		{"line findings", lineFindingsSQL},
	}
	for _, s := range steps {
		if _, err := exec(s.what, s.q); err != nil {
			return nil, err
		}
	}
	if _, err := exec("settlement findings", settlementFindingsSQL, statementID); err != nil {
		return nil, err
	}
	if f := ms.Fees; f != nil {
		if err := f.Validate(); err != nil {
			return nil, err
		}
		if _, err := exec("fee findings", feeFindingsSQL, statementID, f.RateBP, f.FixedMinor, f.Rounding, f.Decimals, f.Refunds,
			feeScheduleJSON(f)); err != nil {
			return nil, err
		}
	}
	if len(ms.Operations) > 0 {
		if !lean {
			if _, err := exec("local only", localOnlySQL, ms.Operations, from, to, scope, channel, currencies); err != nil {
				return nil, err
			}
		}
		var prevID sql.NullInt64
		if ms.Grace > 0 {
			err := tx.QueryRowContext(ctx, `SELECT id FROM statements WHERE channel = $1 AND bill_date = $2::date - 1
				ORDER BY version DESC LIMIT 1`, channel, billDate).Scan(&prevID)
			if err != nil && err != sql.ErrNoRows {
				return nil, fmt.Errorf("match: previous day: %w", err)
			}
		}
		if prevID.Valid {
			// Keys completed up to a grace after the day start too: a local clock that runs
			// behind the channel's (or a completion recorded after the channel's answer) puts a
			// charge the channel booked at 23:59:59 on our side of midnight.
			early := dayStart.Add(ms.Grace)
			if _, err := exec("clear early keys", clearEarlyByOrderSQL, early, prevID.Int64); err != nil {
				return nil, err
			}
			if _, err := exec("clear early keys", clearEarlyByTxnSQL, early, prevID.Int64); err != nil {
				return nil, err
			}
		}
		if _, err := exec("local only findings", localOnlyFindingsSQL); err != nil {
			return nil, err
		}
	}
	if _, err := exec("upsert findings", upsertFindingsSQL, runID, statementID, channel, billDate); err != nil {
		return nil, err
	}
	if latest {
		if res.Closed, err = exec("close findings gone", closeGoneSQL, runID, channel, billDate); err != nil {
			return nil, err
		}
	}
	if err := tx.QueryRowContext(ctx, keysWithoutAccountSQL).Scan(&res.KeysWithoutAccount); err != nil {
		return nil, fmt.Errorf("match: keys without an account: %w", err)
	}
	if _, err := exec("keys without an account", `UPDATE recon_runs SET keys_without_account = $1 WHERE id = $2`,
		res.KeysWithoutAccount, runID); err != nil {
		return nil, err
	}
	rows, err := tx.QueryContext(ctx, `SELECT kind, count(DISTINCT subject) FROM found GROUP BY kind`)
	if err != nil {
		return nil, fmt.Errorf("match: counts: %w", err)
	}
	for rows.Next() {
		var k string
		var n int64
		if err := rows.Scan(&k, &n); err != nil {
			rows.Close()
			return nil, err
		}
		res.Counts[Kind(k)] = n
	}
	rows.Close()
	// The full plan kept every order line; the lean one only those without a key or at odds
	// with theirs, so its total comes from the import.
	var matched, unmatched int64
	if err := tx.QueryRowContext(ctx, `SELECT count(key_id), count(*) - count(key_id) FROM match_lines`).Scan(&matched, &unmatched); err != nil {
		return nil, fmt.Errorf("match: matched: %w", err)
	}
	res.Matched = matched
	if lean {
		res.Lines, res.Matched = orderLines.Int64, orderLines.Int64-unmatched
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("match: commit: %w", err)
	}
	return res, nil
}

// markDuplicates builds dup_txn and multi and marks repeated and secondary lines, each only when
// the probe says there may be some.
func markDuplicates(exec func(what, q string, args ...any) (int64, error), maybeDupTxn, maybeMulti bool) error {
	if maybeDupTxn {
		dups, err := exec("duplicates in file", dupTxnSQL)
		if err != nil {
			return err
		}
		if dups > 0 {
			if _, err := exec("mark repeats", markRepeatsSQL); err != nil {
				return err
			}
		}
	}
	if maybeMulti {
		multi, err := exec("keys with several lines", multiSQL)
		if err != nil {
			return err
		}
		if multi > 0 {
			if _, err := exec("mark secondary", markSecondarySQL); err != nil {
				return err
			}
		}
	}
	return nil
}
