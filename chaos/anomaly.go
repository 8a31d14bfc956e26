package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/idemops/idemops/chaos/report"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/demo"
	"github.com/idemops/idemops/downstream/paysim"
)

// InvAnomaliesFound: the findings invariant's other half — findings that must appear.
const InvAnomaliesFound = "every anomaly planted at the channel found by reconciliation (AMOUNT_MISMATCH, CHANNEL_ONLY)"

// anomaly is a discrepancy planted at paysim on purpose: reconciliation must report it.
type anomaly struct {
	Tenant string // the key's tenant; "" for an order no key has
	Order  string // merchant order number (a key's downstream key, or one no key has)
	Kind   string // the finding it must raise
	Target string // key digest or order, for the report
}

// killPaysim is kill -9 of the channel, then a restart from its state file on the same port:
// every charge it answered is still there (the file is fsync'd before each answer).
func (w *world) killPaysim(ctx context.Context) {
	if !w.paysim.claimCycle() {
		w.fault(KindKillPaysim, "paysim", "skipped: already down or restarting")
		return
	}
	w.paysim.kill()
	w.fault(KindKillPaysim, "paysim", "kill -9; restarting from its state file on the same port")
	w.bg.Add(1)
	go func() {
		defer w.bg.Done()
		defer w.paysim.cycling.Store(false)
		t0 := time.Now()
		if err := w.restart(context.WithoutCancel(ctx), w.paysim); err == nil {
			w.logf("paysim back after %.1fs", time.Since(t0).Seconds())
		}
	}()
}

// killConsole is kill -9 of the console while an operator's replay goes through it: the replay
// starts, and the console dies a moment later (somewhere in its preview, confirmation or run),
// then comes back on the same port. The replay's key and request must end consistent all the
// same (the invariants check the key; the replay machinery resumes or abandons the request).
func (w *world) killConsole(ctx context.Context) {
	if !w.console.claimCycle() {
		w.fault(KindKillConsole, "console", "skipped: already down or restarting")
		return
	}
	w.bg.Add(2)
	go func() { defer w.bg.Done(); w.operator(context.WithoutCancel(ctx), KindOperatorReplay) }()
	delay := time.Duration(200+rand.IntN(1800)) * time.Millisecond
	go func() {
		defer w.bg.Done()
		defer w.console.cycling.Store(false)
		time.Sleep(delay)
		w.console.kill()
		w.fault(KindKillConsole, "console", fmt.Sprintf("kill -9 %v into an operator replay; restarting on the same port", delay))
		t0 := time.Now()
		if err := w.restart(context.WithoutCancel(ctx), w.console); err == nil {
			w.logf("console back after %.1fs", time.Since(t0).Seconds())
		}
	}()
}

// channelAnomaly plants two discrepancies at paysim on the channel the run reconciles (Stripe's
// statement lists only the charges made through Stripe, and those of no channel): the amount of a
// completed payment's Stripe charge changes (AMOUNT_MISMATCH), and a Stripe charge appears that
// no one asked for (CHANNEL_ONLY).
//
// With cells, a completed payment of each cell is altered, so that every cell's reconciliation
// (the statement is matched in each cell) must find its own.
func (w *world) channelAnomaly(ctx context.Context) {
	t := w.traffic
	t.mu.Lock()
	var picks []*keyRecord
	for _, c := range w.pgs {
		for _, r := range t.keys {
			if r.Done && r.Saw2xx && !r.Faulted && r.Key != "" && c.holds(r.Tenant) && chargedThrough(r, "stripe") {
				picks = append(picks, r)
				r.Faulted = true // no other fault may claim its finding
				break
			}
		}
	}
	t.mu.Unlock()
	var done []string
	for _, pick := range picks {
		dk := claim.DownstreamKey(pick.Tenant, demo.OperationCharge, pick.Key)
		digest := w.store.Digest(pick.Tenant, demo.OperationCharge, pick.Key)
		ch, err := w.sim.GetCharge(ctx, dk)
		if err == nil {
			amount := ch.AmountMinor + 1
			_, err = w.sim.AlterCharge(ctx, ch.ID, paysim.ChargeChange{AmountMinor: &amount})
		}
		if err != nil {
			done = append(done, "amount not changed: "+oneLine(err))
		} else {
			w.expect(anomaly{Tenant: pick.Tenant, Order: dk, Kind: "AMOUNT_MISMATCH", Target: digest})
			done = append(done, "amount of "+digest[:12]+"'s charge +1")
		}
	}
	if len(picks) == 0 {
		done = append(done, "no completed payment yet to alter")
	}
	order := "chaos-channel-only-" + randomHex(6)
	if _, err := w.sim.InsertChannelCharge(ctx, paysim.ChannelCharge{AmountMinor: 777, Currency: "USD", MerchantOrderNo: order,
		Payee: "acme-books", Description: "a charge nobody asked for", Channel: "stripe"}); err != nil {
		done = append(done, "channel-only charge not inserted: "+oneLine(err))
	} else {
		w.expect(anomaly{Order: order, Kind: "CHANNEL_ONLY", Target: order})
		done = append(done, "channel-only charge "+order)
	}
	w.fault(KindChannelAnomaly, "paysim", fmt.Sprint(done))
}

// chargedThrough says whether the demo service charges r's payment through paysim's channel
// (demo.ChannelRoutes, by the intent's currency and the downstream key).
func chargedThrough(r *keyRecord, channel string) bool {
	var b struct {
		Currency string `json:"currency"`
	}
	if json.Unmarshal(r.Body, &b) != nil {
		return false
	}
	rt, ok := demo.ChannelRoutes.For(b.Currency, claim.DownstreamKey(r.Tenant, demo.OperationCharge, r.Key))
	return ok && rt.Channel == channel
}

func (w *world) expect(a anomaly) {
	w.mu.Lock()
	w.anomalies = append(w.anomalies, a)
	w.mu.Unlock()
}

// anomaliesFound checks that every planted anomaly has its open finding: with cells, one on a
// key in the key's cell (open: cell cl's findings), one with no key in any cell (every: every
// cell's), checked with the control cell. Without cells open and every are the one cell's.
func (w *world) anomaliesFound(cl *cell, open, every []finding) report.Invariant {
	c := &check{inv: report.Invariant{Name: InvAnomaliesFound, OK: true}}
	w.mu.Lock()
	planted := append([]anomaly(nil), w.anomalies...)
	w.mu.Unlock()
	for _, a := range planted {
		in := open
		switch {
		case a.Tenant == "" && cl != w.pgs[0], a.Tenant != "" && !cl.holds(a.Tenant):
			continue
		case a.Tenant == "":
			in = every
		}
		c.inv.Checked++
		found := false
		for _, o := range in {
			found = found || (o.Order == a.Order && o.Kind == a.Kind)
		}
		if !found {
			c.fail("%s: planted %s at the channel, no open finding", a.Target, a.Kind)
		}
	}
	return c.inv
}
