package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/idemops/idemops/demo"
)

// failedKey makes a key an operator may replay: a payment whose one attempt the channel fails
// (X-Paysim-Fault: error, before anything is charged), so the key is failed_retryable. The
// client's record of it joins the traffic, so the invariants check it like any other.
func (w *world) failedKey(ctx context.Context, n int) (int64, *keyRecord, error) {
	t := w.traffic
	tenant := t.tenants[n%len(t.tenants)]
	rec := &keyRecord{Path: PathHTTP, Tenant: tenant, APIKey: t.apiKeys[tenant], Key: fmt.Sprintf("chaos-operator-%s-%d", randomHex(6), n), Scenario: "operator"}
	rec.Body, _ = json.Marshal(map[string]any{"amount_minor": 4200 + n, "currency": "CNY",
		"merchant_order_no": "chaos-op-" + randomHex(4), "payee": "acme-books", "description": "chaos operator replay"})
	t.mu.Lock()
	t.keys = append(t.keys, rec)
	t.mu.Unlock()
	t.send(ctx, rec, rec.Body, http.Header{"X-Paysim-Fault": {"error"}}, true)
	var ids []int64
	if err := w.cellOf(tenant).db.WithContext(ctx).Raw(`SELECT id FROM idempotency_keys WHERE tenant = ? AND operation = ? AND key = ?`,
		tenant, demo.OperationCharge, rec.Key).Scan(&ids).Error; err != nil {
		return 0, rec, err
	}
	if len(ids) == 0 {
		return 0, rec, fmt.Errorf("no key stored for the operator's payment (its answer: %d)", rec.LastStatus)
	}
	return ids[0], rec, nil
}

// operator runs one console action through /api/v1 with the chaos operators' tokens.
func (w *world) operator(ctx context.Context, kind string) {
	a, b := w.tokens[0], w.tokens[1]
	t0 := time.Now()
	fault := func(kind, target, detail string) { w.faultAt(t0, kind, target, detail) }
	switch kind {
	case KindOperatorReplay:
		id, rec, err := w.failedKey(ctx, 0)
		if err != nil {
			fault(kind, "console", "no replayable key: "+err.Error())
			return
		}
		digest := w.store.Digest(rec.Tenant, demo.OperationCharge, rec.Key)
		var prev struct {
			Allowed       bool   `json:"allowed"`
			Token         string `json:"token"`
			Text          string `json:"text"`
			NeedsApproval bool   `json:"needs_approval"`
		}
		if _, err := w.api.call(ctx, a, http.MethodGet, fmt.Sprintf("/api/v1/keys/%d/replay", id), nil, &prev); err != nil {
			fault(kind, digest, "preview failed: "+err.Error())
			return
		}
		if !prev.Allowed {
			fault(kind, digest, "preview refused: "+prev.Text)
			return
		}
		var conf struct {
			Request struct {
				ID            int64   `json:"id"`
				State         string  `json:"state"`
				NeedsApproval bool    `json:"needs_approval"`
				Outcome       *string `json:"outcome"`
			} `json:"request"`
		}
		if _, err := w.api.call(ctx, a, http.MethodPost, fmt.Sprintf("/api/v1/keys/%d/replay", id),
			map[string]string{"token": prev.Token, "reason": "chaos run: operator replay during faults"}, &conf); err != nil {
			fault(kind, digest, "confirm failed: "+err.Error())
			return
		}
		detail := "replay request " + fmt.Sprint(conf.Request.ID) + ": " + conf.Request.State
		if conf.Request.NeedsApproval {
			var ap struct {
				State   string  `json:"state"`
				Outcome *string `json:"outcome"`
			}
			if _, err := w.api.call(ctx, b, http.MethodPost, fmt.Sprintf("/api/v1/replays/%d/approve", conf.Request.ID), struct{}{}, &ap); err != nil {
				detail += "; approval failed: " + err.Error()
			} else {
				detail += "; approved by a second operator: " + ap.State
			}
		}
		fault(kind, digest, detail)
	case KindBulkReplay:
		var ids []int64
		var digests []string
		for i := 1; i <= 3; i++ {
			id, rec, err := w.failedKey(ctx, i)
			if err == nil {
				ids = append(ids, id)
				digests = append(digests, w.store.Digest(rec.Tenant, demo.OperationCharge, rec.Key)[:12])
			}
		}
		if len(ids) == 0 {
			fault(kind, "console", "no replayable keys could be made")
			return
		}
		var plan struct {
			Plan  string `json:"plan"`
			Token string `json:"token"`
			Total int    `json:"total"`
		}
		if _, err := w.api.call(ctx, a, http.MethodPost, "/api/v1/replays/bulk", map[string]any{"ids": ids}, &plan); err != nil {
			fault(kind, strings.Join(digests, ","), "bulk preview failed: "+err.Error())
			return
		}
		var run struct {
			ID    int64  `json:"id"`
			State string `json:"state"`
		}
		if _, err := w.api.call(ctx, a, http.MethodPost, "/api/v1/replays/bulk/start",
			map[string]string{"plan": plan.Plan, "token": plan.Token, "reason": "chaos run: bulk replay during faults"}, &run); err != nil {
			fault(kind, strings.Join(digests, ","), "bulk start failed: "+err.Error())
			return
		}
		fault(kind, strings.Join(digests, ","), fmt.Sprintf("bulk run %d of %d keys: %s", run.ID, plan.Total, run.State))
	case KindRetentionPurge:
		fault(kind, "console", w.purgeRound(ctx, "scheduled operator purge"))
	case KindReconcileRun:
		_, err := w.api.call(ctx, a, http.MethodPost, "/api/v1/jobs/run", map[string]string{"name": "reconcile:" + ReconJob}, nil)
		fault(kind, "console", "reconciliation of today's paysim Stripe statement requested: "+errText(err))
	}
}

func errText(err error) string {
	if err != nil {
		return err.Error()
	}
	return "accepted"
}
