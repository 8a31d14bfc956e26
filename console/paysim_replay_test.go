package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/console"
	"github.com/idemops/idemops/demo"
	"github.com/idemops/idemops/downstream/paysim"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

// TestReplay_FoundAtTheChannelSendsNoCharge: the demo's payments service charged paysim and
// crashed before its local commit; an operator's replay, whose preview says the channel has the
// charge, records it without sending a second charge. The preview, the audit row and the key's
// history are logged (go test -v) as the sample for the docs.
func TestReplay_FoundAtTheChannelSendsNoCharge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	store, err := claim.NewStore(db, claim.Config{DigestSecret: []byte("paysim-replay-secret-0123")})
	if err != nil {
		t.Fatal(err)
	}
	w, err := demo.StartWorld(ctx, demo.WorldConfig{DB: db, Store: store, Paysim: paysim.Config{Seed: 7}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)

	// The charge reaches paysim; the service crashes between the channel's answer and its commit.
	body := `{"amount_minor": 1234, "currency": "CNY", "merchant_order_no": "ord-77", "payee": "alice", "description": "book"}`
	req, _ := http.NewRequest("POST", w.APIURL+"/v1/payments", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+w.APIKey("acme"))
	req.Header.Set("Idempotency-Key", "order-77-attempt")
	req.Header.Set("X-Demo-Crash", "after-charge")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	dkey := claim.DownstreamKey("acme", "payment.charge", "order-77-attempt")
	if n := w.Paysim.ChargeCount(dkey); n != 1 {
		t.Fatalf("charges at paysim after the crash: %d, want 1", n)
	}
	var keyID int64
	pgtest.Exec(t, db, `UPDATE idempotency_keys SET lease_expires_at = now() - interval '1 second' WHERE downstream_key = ?`, dkey)
	if err := db.Raw(`SELECT id FROM idempotency_keys WHERE downstream_key = ?`, dkey).Scan(&keyID).Error; err != nil || keyID == 0 {
		t.Fatalf("the crashed key: %d %v", keyID, err)
	}

	srv, err := console.New(console.Config{DB: pgtest.Tenant(t, db), Claims: store, Argon2: access.Argon2Params{MemoryKiB: 1024, Time: 1, Threads: 1},
		Operations: func(name string) (claim.Operation, bool) {
			op, err := w.Operations.Get(name)
			return op, err == nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	if _, err := srv.Operators().Add(ctx, access.Change{Actor: "test"}, access.NewOperator{Name: "olga",
		Password: "correct horse battery", Role: access.RoleOperator, Tenants: []string{"acme"}}); err != nil {
		t.Fatal(err)
	}
	token, err := srv.Operators().CreateToken(ctx, access.Change{Actor: "test"}, "olga", "t", 0)
	if err != nil {
		t.Fatal(err)
	}
	call := func(method, path, body string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		var out map[string]any
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("%s %s: %s", method, path, b)
		}
		return res.StatusCode, out
	}

	status, preview := call("GET", fmt.Sprintf("/api/v1/keys/%d/replay", keyID), "")
	text, _ := preview["text"].(string)
	if status != 200 || preview["outcome"] != "recorded" ||
		!strings.HasPrefix(text, "the channel already has this charge (") || !strings.HasSuffix(text, ") — it will be recorded, nothing is sent") {
		t.Fatalf("preview: %d %v", status, preview)
	}
	t.Logf("preview: %s (action: %s)", text, preview["action"])

	confirm, _ := json.Marshal(map[string]string{"token": preview["token"].(string), "reason": "service crashed after the channel charged"})
	status, out := call("POST", fmt.Sprintf("/api/v1/keys/%d/replay", keyID), string(confirm))
	r, _ := out["request"].(map[string]any)
	if status != 201 || r["state"] != "executed" || r["outcome_kind"] != "recorded" {
		t.Fatalf("confirm: %d %v", status, out)
	}
	t.Logf("outcome: %s", r["outcome"])
	if n := w.Paysim.ChargeCount(dkey); n != 1 {
		t.Errorf("charges at paysim after the replay: %d, want still 1", n)
	}
	k, err := store.Get(ctx, keyID)
	if err != nil || k.State != claim.StateCompleted {
		t.Fatalf("key after the replay: %v %v", k, err)
	}
	var payments int64
	db.Raw(`SELECT count(*) FROM payments WHERE key_id = ?`, keyID).Scan(&payments)
	if payments != 1 {
		t.Errorf("payments rows: %d, want 1 (Apply ran once, on recovery)", payments)
	}

	var audit []struct {
		Seq                                    int64
		Actor, Action, Target, Tenants, Detail string
	}
	db.Raw(`SELECT seq, actor, action, target, array_to_json(tenants)::text AS tenants, detail FROM audit_log WHERE action LIKE 'replay.%' ORDER BY seq`).Scan(&audit)
	if len(audit) != 2 || audit[0].Action != "replay.request" || audit[1].Action != "replay.execute" ||
		!strings.Contains(audit[1].Detail, `"outcome":"recorded"`) || audit[1].Actor != "operator:olga" {
		t.Errorf("audit rows: %+v", audit)
	}
	for _, a := range audit {
		t.Logf("audit #%d %s %s %s tenants=%s %s", a.Seq, a.Actor, a.Action, a.Target, a.Tenants, a.Detail)
	}
	evs, _ := store.History(ctx, keyID, 0)
	var kinds []string
	for _, e := range evs {
		kinds = append(kinds, e.Kind)
		t.Logf("history %s %-26s %-16s %s", e.At.UTC().Format("15:04:05.000"), e.Kind, e.Actor, e.Detail)
	}
	if got := strings.Join(kinds, " "); !strings.HasSuffix(got, "replay_requested taken_over recovered_from_downstream") {
		t.Errorf("history: %s", got)
	}
}
