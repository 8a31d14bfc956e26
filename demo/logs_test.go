package demo_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/demo"
	"github.com/idemops/idemops/downstream/paysim"
	"github.com/idemops/idemops/internal/testinfra/clock"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
	"github.com/idemops/idemops/internal/testinfra/syncbuf"
	"github.com/idemops/idemops/reconcile"
	"github.com/idemops/idemops/retention"
)

func secret(prefix string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// TestLogs_CarryDigestsNeverKeysOrBodies runs the demo world through a claim, a replay, a
// mismatch, a refusal, a dropped channel answer, a crash taken over by the reclaimer, the outbox
// relay, a purge, a late retry after the purge and a reconciliation, with every log line of the
// process captured, and finds no raw key, request body or response body (nor a field of one) in
// any line — the crash's line names the key by its digest. It also proves the second line of
// defence: the purged key's late retry is still one charge at paysim.
//
// Not parallel: it captures the process-wide default logger, which the world's parts log to.
func TestLogs_CarryDigestsNeverKeysOrBodies(t *testing.T) {
	logs := &syncbuf.Buffer{}
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() { slog.SetDefault(old) })
	waitPastShanghaiMidnight(t)

	ctx := context.Background()
	db := pgtest.New(t)
	store, err := claim.NewStore(db, claim.Config{DigestSecret: []byte("demo-test-secret-0123"), LeaseTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	w, err := demo.StartWorld(ctx, demo.WorldConfig{DB: db, Store: store, Paysim: paysim.Config{Seed: 11}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	apiKey := w.APIKey("acme")

	var secrets []string // everything that must never reach a log line
	type answer struct {
		status   int
		replayed bool
	}
	fields := map[string][3]string{} // a key's merchant order no, payee and description, kept across its retries
	pay := func(key string, amount int, headers ...string) answer {
		t.Helper()
		f, ok := fields[key]
		if !ok {
			f = [3]string{secret("MORD-"), secret("PAYEE-"), secret("DESC-")}
			fields[key] = f
		}
		order, payee := f[0], f[1]
		body := fmt.Sprintf(`{"amount_minor": %d, "currency": "CNY", "merchant_order_no": %q, "payee": %q, "description": %q}`,
			amount, order, payee, f[2])
		req, _ := http.NewRequest("POST", w.APIURL+"/v1/payments", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+apiKey)
		req.Header.Set("Idempotency-Key", key)
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		resp, _ := io.ReadAll(res.Body)
		secrets = append(secrets, key, body, order, payee, f[2])
		if len(resp) > 0 {
			secrets = append(secrets, string(resp))
		}
		return answer{res.StatusCode, res.Header.Get("Idempotent-Replayed") == "true"}
	}
	expect := func(what string, got answer, status int, replayed bool) {
		t.Helper()
		if got.status != status || got.replayed != replayed {
			t.Fatalf("%s: %+v, want %d replayed=%v", what, got, status, replayed)
		}
	}

	paid, crashed, dropped := secret("LOGKEY-paid-"), secret("LOGKEY-crash-"), secret("LOGKEY-drop-")
	expect("claim", pay(paid, 1200), 201, false)
	expect("replay", pay(paid, 1200), 201, true)
	expect("mismatch", pay(paid, 1300), 422, false)
	expect("refusal", pay(secret("LOGKEY-bad-"), -5), 400, false)
	expect("dropped answer", pay(dropped, 1400, paysim.HeaderFault, "drop-response"), 503, false)
	expect("retry recovers", pay(dropped, 1400), 201, false)
	expect("crash", pay(crashed, 1500, "X-Demo-Crash", "after-charge"), 500, false)

	reclaim, err := daemon.NewReclaimJob(store, demo.Ops{W: w}, daemon.ReclaimConfig{})
	if err != nil {
		t.Fatal(err)
	}
	// Takeover once the crashed attempt's lease lapses (one TTL after the crash).
	pgtest.SleepUntil(t, db, `SELECT max(lease_expires_at) FROM idempotency_keys WHERE state = 'processing'`)
	if stats, err := reclaim.RunOnce(ctx, nil, daemon.NopProgress{}); err != nil || !stats.Changed() {
		t.Fatalf("the reclaimer did not take the crashed key over: %v, %v", stats, err)
	}
	relay, err := daemon.NewOutboxRelay(db, w.Senders(), daemon.OutboxConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := relay.RunOnce(ctx, nil, daemon.NopProgress{}); err != nil {
		t.Fatal(err)
	}

	// Purge the completed key as if its time were long over, then a late retry: a new intent
	// for the claim logic, but the same downstream key, so the channel charges nothing twice.
	pgtest.Exec(t, db, `UPDATE idempotency_keys SET completed_at = now() - interval '90 days', updated_at = now() - interval '90 days',
		response_expires_at = now() - interval '80 days', expires_at = now() - interval '1 day' WHERE key = ?`, paid)
	purge, err := retention.NewPurgeJob(db, retention.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := purge.RunOnce(ctx, nil, daemon.NopProgress{}); err != nil {
		t.Fatal(err)
	}
	var left int64
	db.Raw(`SELECT count(*) FROM idempotency_keys WHERE key = ?`, paid).Scan(&left)
	if left != 0 {
		t.Fatal("the purge left the key")
	}
	expect("late retry after the purge", pay(paid, 1200), 201, false)
	dkPaid := claim.DownstreamKey("acme", demo.OperationCharge, paid)
	if n := w.Paysim.ChargeCount(dkPaid); n != 1 {
		t.Fatalf("purged key's late retry: %d charges at paysim, want 1", n)
	}

	rec, err := reconcile.New(db, reconcile.Config{Store: store, Operations: demo.Ops{W: w}})
	if err != nil {
		t.Fatal(err)
	}
	date := time.Now().In(paysim.Shanghai).Format(time.DateOnly)
	stmt, err := w.Client.Statement(ctx, date, paysim.FormatWechat)
	if err != nil {
		t.Fatal(err)
	}
	run, err := rec.Reconcile(ctx, reconcile.RunRequest{
		Import: reconcile.ImportRequest{Channel: "wechat", Format: "wechat", BillDate: date, Location: paysim.Shanghai, Importer: "operator:logs"},
		Match:  &reconcile.MatchSettings{Operations: []string{demo.OperationCharge}, Location: paysim.Shanghai},
	}, bytes.NewReader(stmt), nil)
	if err != nil || run.Status != reconcile.RunSucceeded {
		t.Fatalf("reconcile: %+v %v", run, err)
	}

	out := logs.String()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if digest := store.Digest("acme", demo.OperationCharge, crashed); !strings.Contains(out, digest) {
		t.Fatalf("no log line names the crashed key by its digest %s; captured %d lines:\n%s", digest, len(lines), out)
	}
	for _, s := range secrets {
		for _, line := range lines {
			if strings.Contains(line, s) {
				t.Errorf("a log line carries %q: %s", s, line)
			}
		}
	}
	t.Logf("%d log lines checked against %d secrets", len(lines), len(secrets))
}

// waitPastShanghaiMidnight keeps the run inside one Shanghai day, the bill date the
// reconciliation reads.
func waitPastShanghaiMidnight(t *testing.T) { clock.AvoidMidnight(t, paysim.Shanghai, 30*time.Second) }
