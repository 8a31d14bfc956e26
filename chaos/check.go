package chaos

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/chaos/history"
	"github.com/idemops/idemops/chaos/report"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/demo"
)

// The invariants (issue 22 item 3), by name in the report.
const (
	InvOneCharge       = "every 2xx key has exactly one succeeded charge at paysim"
	InvNoOrphanCharge  = "no charge at paysim without a completed key (or an open finding naming it)"
	InvNoLostKey       = "no completed key lost (2xx keys completed, same payment)"
	InvMismatch        = "a key reused with another amount is never answered 2xx"
	InvConsumerOnce    = "every consumer effect applied exactly once (fulfillment, shipping)"
	InvOrders          = "every order in the right final state (paid, as the channel says)"
	InvAudit           = "the audit chain verifies against its mid-run checkpoint"
	InvFindings        = "reconciliation findings only where faults were injected on purpose"
	InvNothingInFlight = "nothing left in flight (no processing key, no unsent outbox row)"
	InvAdjustments     = "every balance is the sum of its adjustments and paid orders, each adjustment key applied at most once"
	InvLedger          = "every ledger entry booked exactly once at the ledger that does not dedupe (outbox)"
)

// maxViolations bounds the keys named per invariant in the report.
const maxViolations = 50

type check struct {
	inv report.Invariant
}

func (c *check) fail(format string, args ...any) {
	c.inv.OK = false
	if len(c.inv.Violations) < maxViolations {
		c.inv.Violations = append(c.inv.Violations, fmt.Sprintf(format, args...))
	}
}

// settle waits (bounded) for the world to be quiet, has it reconciled once more, and checks the
// invariants until they hold or the bound passes; the last result is the verdict.
func (w *world) settle(ctx context.Context, marks map[string]*audit.Head) []report.Invariant {
	deadline := time.Now().Add(SettleLimit)
	reconciled := false
	var last []report.Invariant
	for {
		quiet := w.quiet(ctx)
		if (quiet || time.Now().After(deadline.Add(-20*time.Second))) && !reconciled {
			reconciled = true
			w.reconcileNow(ctx)
		}
		last = w.invariants(ctx, marks)
		ok := true
		for _, inv := range last {
			ok = ok && inv.OK
		}
		if (ok && reconciled) || time.Now().After(deadline) || ctx.Err() != nil {
			w.logf("settled (%v): invariants %s", ok, map[bool]string{true: "hold", false: "broken"}[ok])
			return last
		}
		time.Sleep(3 * time.Second)
	}
}

// quiet: no processing key and no outbox row waiting, in any cell.
func (w *world) quiet(ctx context.Context) bool {
	for _, c := range w.pgs {
		var n int64
		if err := c.db.WithContext(ctx).Raw(`SELECT (SELECT count(*) FROM idempotency_keys WHERE state = 'processing')
		+ (SELECT count(*) FROM outbox WHERE state IN ('pending', 'sending'))`).Scan(&n).Error; err != nil || n > 0 {
			return false
		}
	}
	return true
}

// reconcileNow has the console run today's reconciliation and waits (up to 30 s) for it.
func (w *world) reconcileNow(ctx context.Context) {
	var before int64
	_ = w.db.WithContext(ctx).Raw(`SELECT coalesce(max(id), 0) FROM recon_runs`).Scan(&before).Error
	if _, err := w.api.call(ctx, w.tokens[0], http.MethodPost, "/api/v1/jobs/run", map[string]string{"name": "reconcile:" + ReconJob}, nil); err != nil {
		w.logf("settle: reconciliation not started: %v", err)
		return
	}
	for range 30 {
		var n int64
		q := `SELECT count(*) FROM recon_runs WHERE id > ? AND finished_at IS NOT NULL`
		if w.withCells() { // the job's run, which ends after every cell's own run (job_id NULL)
			q += ` AND job_id IS NOT NULL`
		}
		_ = w.db.WithContext(ctx).Raw(q, before).Scan(&n).Error
		if n > 0 {
			w.logf("settle: reconciliation ran")
			return
		}
		time.Sleep(time.Second)
	}
	w.logf("settle: reconciliation did not finish within 30s")
}

type storedKey struct {
	Tenant, Key, State, KeyDigest, DownstreamKey string
	ResourceID                                   *string
}

// finding is an open reconciliation finding, by merchant order number (= downstream key).
type finding struct{ Order, Kind, Detail string }

// openFindings are a cell's open findings.
func openFindings(ctx context.Context, db *gorm.DB) []finding {
	var open []finding
	_ = db.WithContext(ctx).Raw(`SELECT coalesce(l.merchant_order_no, k.downstream_key, '') AS order, d.kind, left(coalesce(d.detail::text, ''), 200) AS detail
		FROM discrepancies d LEFT JOIN statement_lines l ON l.id = d.statement_line_id LEFT JOIN idempotency_keys k ON k.id = d.key_id
		WHERE d.state = 'open'`).Scan(&open).Error
	return open
}

// invariants checks every invariant; with cells, each in every cell (report.Invariant.Cell):
// the keys of the cell's tenants against the cell's rows, its audit chain against its own
// checkpoint (marks by cell name; "" without cells).
func (w *world) invariants(ctx context.Context, marks map[string]*audit.Head) []report.Invariant {
	if !w.withCells() {
		c := w.pgs[0]
		return w.invariantsIn(ctx, c, marks[""], openFindings(ctx, c.db))
	}
	var every []finding // a key-less finding is kept in one cell only (reconcile's cross-cell settlement)
	for _, c := range w.pgs {
		every = append(every, openFindings(ctx, c.db)...)
	}
	var out []report.Invariant
	for _, c := range w.pgs {
		invs := w.invariantsIn(ctx, c, marks[c.name], every)
		for i := range invs {
			invs[i].Cell = c.name
		}
		out = append(out, invs...)
	}
	return out
}

// invariantsIn checks cell c; every is the open findings of every cell (c's alone without cells).
// Executions (charges, effects, rows under a key) are counted in every cell, so a key executed
// once in each of two cells is a double.
func (w *world) invariantsIn(ctx context.Context, c *cell, mark *audit.Head, every []finding) []report.Invariant {
	t := w.traffic
	t.mu.Lock()
	var recs []keyRecord
	for _, r := range t.keys {
		if c.holds(r.Tenant) {
			recs = append(recs, *r)
		}
	}
	t.mu.Unlock()

	rows, elsewhere := w.chargeKeys(ctx, c)
	stored := map[string]storedKey{}
	for _, r := range rows {
		stored[r.Tenant+"\x00"+r.Key] = r
	}
	open := openFindings(ctx, c.db)
	if !w.withCells() {
		open = every
	}
	openFinding := map[string]bool{}
	for _, o := range every {
		openFinding[o.Order] = true
	}

	one := &check{inv: report.Invariant{Name: InvOneCharge, OK: true}}
	orphan := &check{inv: report.Invariant{Name: InvNoOrphanCharge, OK: true}}
	lost := &check{inv: report.Invariant{Name: InvNoLostKey, OK: true}}
	mism := &check{inv: report.Invariant{Name: InvMismatch, OK: true}}
	cons := &check{inv: report.Invariant{Name: InvConsumerOnce, OK: true}}
	orders := &check{inv: report.Invariant{Name: InvOrders, OK: true}}
	find := &check{inv: report.Invariant{Name: InvFindings, OK: true}}
	faulted := map[string]bool{}
	w.mu.Lock()
	for _, a := range w.anomalies {
		faulted[a.Order] = true
	}
	w.mu.Unlock()
	t.mu.Lock()
	for _, r := range t.keys { // every cell's: a key-less finding is kept in one cell only
		if r.Key != "" && (r.Faulted || r.Scenario == "crash") {
			faulted[claim.DownstreamKey(r.Tenant, demo.OperationCharge, r.Key)] = true
		}
	}
	for _, r := range t.tips {
		// A tip the channel failed or dropped, or whose last answer was none or a 5xx (a
		// killed paysim or replica under it): its key is held, and the channel may have it.
		if r.Faulted || r.LastStatus == 0 || r.LastStatus >= 500 {
			faulted[claim.DownstreamKey(r.Tenant, demo.OperationTip, r.Key)] = true
		}
	}
	t.mu.Unlock()
	for _, r := range recs {
		if r.Key == "" {
			continue // a checkout whose token was never issued: no key
		}
		dk := claim.DownstreamKey(r.Tenant, demo.OperationCharge, r.Key)
		digest := w.store.Digest(r.Tenant, demo.OperationCharge, r.Key)
		if r.Faulted || r.Scenario == "crash" {
			faulted[dk] = true
		}
		sk, haveKey := stored[r.Tenant+"\x00"+r.Key]
		list, err := w.sim.Charges(ctx, dk)
		succeeded := 0
		if err == nil {
			for _, c := range list.Charges {
				if c.Status == "succeeded" {
					succeeded++
				}
			}
		}
		mism.inv.Checked++
		if r.Mismatch2xx {
			mism.fail("%s: the other amount was answered 2xx", digest)
		}
		orphan.inv.Checked++
		if err != nil {
			orphan.fail("%s: paysim lookup failed: %v", digest, err)
		} else if list.Count > 1 {
			orphan.fail("%s: %d charges at paysim for one key", digest, list.Count)
		} else if succeeded == 1 && (!haveKey || sk.State != string(claim.StateCompleted)) && !openFinding[dk] {
			state := "no key"
			if haveKey {
				state = sk.State
			}
			orphan.fail("%s: charged at paysim, key %s, no open finding", digest, state)
		}
		if r.Saw2xx {
			one.inv.Checked++
			if err == nil && succeeded != 1 {
				one.fail("%s: answered 2xx, %d succeeded charges at paysim", digest, succeeded)
			}
			lost.inv.Checked++
			switch {
			case !haveKey && elsewhere[r.Tenant+"\x00"+r.Key] != "":
				lost.fail("%s: answered 2xx, key in cell %s, not in its tenant's cell %s", digest, elsewhere[r.Tenant+"\x00"+r.Key], c.name)
			case !haveKey:
				lost.fail("%s: answered 2xx, key gone", digest)
			case sk.State != string(claim.StateCompleted):
				lost.fail("%s: answered 2xx, key %s", digest, sk.State)
			case r.PaymentID != "" && (sk.ResourceID == nil || *sk.ResourceID != r.PaymentID):
				lost.fail("%s: answered payment %s, key holds another", digest, r.PaymentID)
			}
		}
		if haveKey && sk.State == string(claim.StateCompleted) && succeeded == 1 {
			pid := demo.PaymentID(sk.DownstreamKey)
			var f struct{ Fulfillments, Shipments, Payments int64 }
			for _, cc := range w.pgs { // wherever the consumers wrote them
				var n struct{ Fulfillments, Shipments, Payments int64 }
				_ = cc.db.WithContext(ctx).Raw(`SELECT (SELECT count(*) FROM fulfillments WHERE payment_id = ?) AS fulfillments,
				(SELECT count(*) FROM shipping_notices WHERE payment_id = ?) AS shipments,
				(SELECT count(*) FROM payments WHERE id = ?) AS payments`, pid, pid, pid).Scan(&n).Error
				f.Fulfillments, f.Shipments, f.Payments = f.Fulfillments+n.Fulfillments, f.Shipments+n.Shipments, f.Payments+n.Payments
			}
			cons.inv.Checked++
			if f.Payments != 1 || f.Fulfillments != 1 || f.Shipments != 1 {
				cons.fail("%s: payments %d, fulfillments %d, shipping notices %d (want 1 each)", digest, f.Payments, f.Fulfillments, f.Shipments)
			}
			var st []string
			_ = c.db.WithContext(ctx).Raw(`SELECT status FROM demo_orders WHERE merchant_order_no = ?`, dk).Scan(&st).Error
			orders.inv.Checked++
			if len(st) != 1 || st[0] != string(demo.OrderPaid) {
				orders.fail("%s: order %v, the channel says succeeded (want paid)", digest, st)
			}
		}
	}
	// Effects with no payment behind them.
	if extra := w.strayEffects(ctx, c); extra > 0 {
		cons.fail("%d fulfillment or shipping rows name no payment", extra)
	}
	// Orders with no completed payment key behind them (an order is opened in its key's cell).
	var strayOrders []string
	_ = c.db.WithContext(ctx).Raw(`SELECT o.merchant_order_no FROM demo_orders o WHERE NOT EXISTS
		(SELECT 1 FROM idempotency_keys k WHERE k.downstream_key = o.merchant_order_no AND k.state = 'completed') LIMIT ?`,
		maxViolations).Scan(&strayOrders).Error
	for _, o := range strayOrders {
		orders.fail("order %s: no completed payment key opened it", o)
	}
	for _, o := range open {
		find.inv.Checked++
		if !faulted[o.Order] {
			d := o.Order
			for _, r := range rows {
				if r.DownstreamKey == o.Order {
					d = r.KeyDigest
				}
			}
			find.fail("%s: open %s finding where no fault was injected (%s)", d, o.Kind, o.Detail)
		}
	}

	inv := report.Invariant{Name: InvAudit, OK: true}
	opt := audit.VerifyOptions{ExpectHead: mark}
	res, err := audit.New(c.db, w.store.Config().DigestSecret).Verify(ctx, opt)
	inv.Checked = int(res.Rows)
	switch {
	case err != nil:
		inv.OK, inv.Violations = false, []string{err.Error()}
	case !res.OK():
		inv.OK, inv.Violations = false, []string{fmt.Sprintf("row %d: %s", res.BadSeq, res.Reason)}
	case c != w.pgs[0] && res.Rows > 0:
		// The chain is the control cell's alone (a cell's jobs append there, cmd/idemops/cells.go):
		// in any other cell it stays empty, and a row there is an action audited in the wrong place.
		inv.OK, inv.Violations = false, []string{fmt.Sprintf("%d rows in %s's audit_log: the audit chain is the control cell's alone", res.Rows, c.label())}
	case mark == nil:
		inv.OK, inv.Violations = false, []string{"no checkpoint was recorded mid-run"}
	}

	flight := report.Invariant{Name: InvNothingInFlight, OK: true, Checked: len(rows)}
	var inflight []struct {
		KeyDigest, Operation string
	}
	_ = c.db.WithContext(ctx).Raw(`SELECT key_digest, operation FROM idempotency_keys WHERE state = 'processing' LIMIT ?`, maxViolations).Scan(&inflight).Error
	for _, k := range inflight {
		flight.OK = false
		flight.Violations = append(flight.Violations, k.KeyDigest+": still processing ("+k.Operation+")")
	}
	var unsent int64
	_ = c.db.WithContext(ctx).Raw(`SELECT count(*) FROM outbox WHERE state <> 'sent'`).Scan(&unsent).Error
	if unsent > 0 {
		flight.OK = false
		flight.Violations = append(flight.Violations, fmt.Sprintf("%d outbox rows not sent", unsent))
	}
	return []report.Invariant{one.inv, orphan.inv, lost.inv, mism.inv, cons.inv, orders.inv, inv, find.inv, flight,
		w.anomaliesFound(c, open, every), w.adjustments(ctx, c), w.ledgerEntries(ctx, c)}
}

// chargeKeys are cell c's payment.charge keys, and, with cells, the cell each key of c's
// tenants is in when it is in another one (tenant+"\x00"+key → cell): never right.
func (w *world) chargeKeys(ctx context.Context, c *cell) ([]storedKey, map[string]string) {
	var rows []storedKey
	_ = c.db.WithContext(ctx).Raw(`SELECT tenant, key, state, key_digest, downstream_key, resource_id FROM idempotency_keys WHERE operation = ?`,
		demo.OperationCharge).Scan(&rows).Error
	elsewhere := map[string]string{}
	for _, o := range w.pgs {
		if o == c {
			continue
		}
		var there []storedKey
		_ = o.db.WithContext(ctx).Raw(`SELECT tenant, key FROM idempotency_keys WHERE operation = ? AND tenant IN ?`,
			demo.OperationCharge, c.tenants).Scan(&there).Error
		for _, r := range there {
			elsewhere[r.Tenant+"\x00"+r.Key] = o.name
		}
	}
	return rows, elsewhere
}

// strayEffects counts cell c's fulfillment and shipping rows whose payment is in no cell.
func (w *world) strayEffects(ctx context.Context, c *cell) int64 {
	var extra int64
	if !w.withCells() {
		_ = c.db.WithContext(ctx).Raw(`SELECT (SELECT count(*) FROM fulfillments f WHERE NOT EXISTS (SELECT 1 FROM payments p WHERE p.id = f.payment_id))
		+ (SELECT count(*) FROM shipping_notices s WHERE NOT EXISTS (SELECT 1 FROM payments p WHERE p.id = s.payment_id))`).Scan(&extra).Error
		return extra
	}
	payments := map[string]bool{}
	for _, o := range w.pgs {
		var ids []string
		_ = o.db.WithContext(ctx).Raw(`SELECT id FROM payments`).Scan(&ids).Error
		for _, id := range ids {
			payments[id] = true
		}
	}
	var effects []string
	_ = c.db.WithContext(ctx).Raw(`SELECT payment_id FROM fulfillments UNION ALL SELECT payment_id FROM shipping_notices`).Scan(&effects).Error
	for _, id := range effects {
		if !payments[id] {
			extra++
		}
	}
	return extra
}

// ledgerRows are the outbox rows bound for the non-idempotent ledger, in cell c.
func (w *world) ledgerRows(ctx context.Context, c *cell) ([]struct{ DownstreamKey, State string }, error) {
	var rows []struct{ DownstreamKey, State string }
	err := c.db.WithContext(ctx).Raw(`SELECT downstream_key, state FROM outbox WHERE operation = ?`, demo.OperationLedgerPost).Scan(&rows).Error
	return rows, err
}

// ledgerEntries checks the outbox path to a downstream without idempotency: each row sent is
// booked exactly once, none twice (the rows of cell c; the ledger is every cell's).
func (w *world) ledgerEntries(ctx context.Context, cl *cell) report.Invariant {
	c := &check{inv: report.Invariant{Name: InvLedger, OK: true}}
	rows, err := w.ledgerRows(ctx, cl)
	if err != nil {
		c.fail("outbox not read: %v", err)
		return c.inv
	}
	for _, r := range rows {
		c.inv.Checked++
		switch n := w.ledger.booked(r.DownstreamKey); {
		case n > 1:
			c.fail("ledger reference %s: booked %d times", r.DownstreamKey[:16], n)
		case r.State == "sent" && n != 1:
			c.fail("ledger reference %s: outbox row sent, booked %d times", r.DownstreamKey[:16], n)
		}
	}
	return c.inv
}

// adjustments checks the one-commit path: each balance equals the sum of its adjustment rows,
// no key has two rows, and every key answered 2xx has its one row.
func (w *world) adjustments(ctx context.Context, cl *cell) report.Invariant {
	c := &check{inv: report.Invariant{Name: InvAdjustments, OK: true}}
	var off []struct {
		ID           string
		Balance, Sum int64
	}
	// A paid order credits its tenant's balance in the same transaction (a refund debits it
	// again), so a balance is its adjustments plus its orders that stand paid.
	if err := cl.db.WithContext(ctx).Raw(`WITH adj AS (
		    SELECT tenant || '|' || currency AS id, sum(amount_minor) AS s FROM demo_balance_adjustments GROUP BY 1
		), paid AS (
		    SELECT tenant || '|' || upper(currency) AS id, sum(amount_minor) AS s FROM demo_orders WHERE status = 'paid' GROUP BY 1
		)
		SELECT b.id, b.balance_minor AS balance, coalesce(adj.s, 0) + coalesce(paid.s, 0) AS sum
		FROM demo_balances b LEFT JOIN adj ON adj.id = b.id LEFT JOIN paid ON paid.id = b.id
		WHERE b.balance_minor <> coalesce(adj.s, 0) + coalesce(paid.s, 0)`).Scan(&off).Error; err != nil {
		c.fail("balances not read: %v", err)
	}
	for _, b := range off {
		c.fail("balance %s is %d, its adjustments and paid orders add up to %d", b.ID, b.Balance, b.Sum)
	}
	w.traffic.mu.Lock()
	var recs []keyRecord
	for _, r := range w.traffic.adjusts {
		if cl.holds(r.Tenant) {
			recs = append(recs, *r)
		}
	}
	w.traffic.mu.Unlock()
	for _, r := range recs {
		c.inv.Checked++
		n, err := w.adjustmentRows(ctx, r.Tenant, r.Key)
		digest := w.store.Digest(r.Tenant, demo.OperationAdjust, r.Key)
		switch {
		case err != nil:
			c.fail("%s: rows not counted: %v", digest, err)
		case n > 1:
			c.fail("%s: %d adjustment rows for one key", digest, n)
		case r.Saw2xx && n != 1:
			c.fail("%s: answered 2xx, %d adjustment rows", digest, n)
		}
	}
	return c.inv
}

// adjustmentRows counts the adjustment rows written under one key, in every cell.
func (w *world) adjustmentRows(ctx context.Context, tenant, key string) (int, error) {
	total := 0
	for _, c := range w.pgs {
		var n int64
		if err := c.db.WithContext(ctx).Raw(`SELECT count(*) FROM demo_balance_adjustments a JOIN idempotency_keys k ON k.id = a.key_id
		WHERE k.tenant = ? AND k.operation = ? AND k.key = ?`, tenant, demo.OperationAdjust, key).Scan(&n).Error; err != nil {
			return 0, err
		}
		total += int(n)
	}
	return total, nil
}

// Paths are the paths of the world a run must walk, as report.json's "paths" names them.
var Paths = []string{PathHTTP, PathGRPC, PathOutbox, PathCheckout, PathLikes, PathAdjustments, PathConsumer, PathPurgedRetried}

// InvPathsWalked: a run that skipped a path proves nothing about it; with cells, nor one in which
// a cell served nothing (cellsWalked).
const InvPathsWalked = "every path of the world walked (each of report.json's paths > 0)"

// pathsWalked checks that every path saw at least one logical operation.
func pathsWalked(p map[string]int) report.Invariant {
	c := &check{inv: report.Invariant{Name: InvPathsWalked, OK: true}}
	for _, name := range Paths {
		c.inv.Checked++
		if p[name] == 0 {
			c.fail("%s: walked 0 times", name)
		}
	}
	return c.inv
}

// cellsWalked adds each cell to walked (pathsWalked's invariant) in a run with cells: a cell none
// of whose tenants' keys the client saw answered 2xx checked nothing — every invariant held there
// because nothing reached it — so it fails the run like a path walked zero times. (A cell that
// stayed down all run, its tenants answered 503, passed every invariant before.)
func cellsWalked(walked report.Invariant, invs []report.Invariant) report.Invariant {
	c := &check{inv: walked}
	for _, inv := range invs {
		if inv.Name != InvNoLostKey || inv.Cell == "" {
			continue
		}
		c.inv.Checked++
		if inv.Checked == 0 {
			c.fail("cell %s: no key of its tenants answered 2xx — it served nothing, so nothing was checked there", inv.Cell)
		}
	}
	return c.inv
}

// paths is report.json's "paths": the logical operations started down each path, the payment
// events whose consumer effects were checked, and the keys purged then retried.
func (w *world) paths(invs []report.Invariant) map[string]int {
	w.traffic.mu.Lock()
	p := map[string]int{}
	for _, name := range Paths {
		p[name] = w.traffic.paths[name]
	}
	w.traffic.mu.Unlock()
	checked := map[string]int{} // summed over the cells
	for _, inv := range invs {
		switch inv.Name {
		case InvConsumerOnce:
			checked[PathConsumer] += inv.Checked
		case InvLedger:
			checked[PathOutbox] += inv.Checked
		}
	}
	for name, n := range checked {
		p[name] = n
	}
	return p
}

// countExecutions adds to the history, for every payments key, how many charges the channel
// holds under its downstream key: the executions the model allows at most one of.
func (w *world) countExecutions(ctx context.Context) {
	w.traffic.mu.Lock()
	recs := append([]*keyRecord(nil), w.traffic.keys...)
	w.traffic.mu.Unlock()
	for _, r := range recs {
		if r.Key == "" {
			continue
		}
		dk := claim.DownstreamKey(r.Tenant, demo.OperationCharge, r.Key)
		done := w.hist.Begin(history.Input{Key: r.histKey(), Kind: history.Count})
		n, err := w.sim.ChargeCount(ctx, dk)
		if err != nil {
			w.logf("linearizability: charges of %s not counted: %v", w.store.Digest(r.Tenant, demo.OperationCharge, r.Key), err)
			continue // an operation without a return is not in the history
		}
		done(history.Output{Executions: n})
	}
	w.traffic.mu.Lock()
	adjusts := append([]*keyRecord(nil), w.traffic.adjusts...)
	tips := append([]*keyRecord(nil), w.traffic.tips...)
	var likes []likeRecord
	for l := range w.traffic.likes {
		likes = append(likes, l)
	}
	w.traffic.mu.Unlock()
	for _, c := range w.pgs {
		if rows, err := w.ledgerRows(ctx, c); err == nil {
			for _, r := range rows { // the relay's executions at the ledger: entries booked
				done := w.hist.Begin(history.Input{Key: PathOutbox + "|" + r.DownstreamKey, Kind: history.Count})
				done(history.Output{Executions: w.ledger.booked(r.DownstreamKey)})
			}
		}
	}
	for _, r := range tips { // the plain handler's executions: charges under its downstream key
		done := w.hist.Begin(history.Input{Key: r.histKey(), Kind: history.Count})
		if n, err := w.sim.ChargeCount(ctx, claim.DownstreamKey(r.Tenant, demo.OperationTip, r.Key)); err == nil {
			done(history.Output{Executions: n})
		}
	}
	for _, r := range adjusts {
		done := w.hist.Begin(history.Input{Key: r.histKey(), Kind: history.Count})
		if n, err := w.adjustmentRows(ctx, r.Tenant, r.Key); err == nil {
			done(history.Output{Executions: n})
		}
	}
	for _, l := range likes {
		done := w.hist.Begin(history.Input{Key: l.histKey(), Kind: history.Count})
		total, err := 0, error(nil)
		for _, c := range w.pgs { // wherever the likes are kept
			var n int64
			if err = c.db.WithContext(ctx).Raw(`SELECT count(*) FROM demo_likes WHERE tenant = ? AND article_id = ? AND user_id = ?`,
				l.Tenant, l.Article, l.User).Scan(&n).Error; err != nil {
				break
			}
			total += int(n)
		}
		if err == nil {
			done(history.Output{Executions: total})
		}
	}
}
