package httpidem_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/claim/httpidem"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
	"github.com/idemops/idemops/retention"
)

func statusDoc(t *testing.T, r resp) httpidem.StatusDoc {
	t.Helper()
	if r.status != 200 || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("status lookup: %d %s", r.status, r.body)
	}
	var d httpidem.StatusDoc
	if err := json.Unmarshal([]byte(r.body), &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// The 409 in-progress points to the status lookup; it answers the state, then the same answer a
// replay gives; another tenant's key answers exactly like a missing one.
func TestStatus_InProgressPointsToTheLookupScopedToTheCaller(t *testing.T) {
	eachFlavor(t, func(t *testing.T, flavor string) {
		w := newWorldOn(t, flavor)
		release := w.holdCharges()
		defer release()
		done := make(chan resp)
		go func() { done <- w.post("/charge", "tok-a", []string{"k-status"}, pay) }()
		w.awaitProcessing()
		busy := w.post("/charge", "tok-a", []string{"k-status"}, pay)
		if busy.status != 409 {
			t.Fatalf("not in progress: %+v", busy)
		}
		var p httpidem.Problem
		_ = json.Unmarshal([]byte(busy.body), &p)
		loc := busy.header.Get("Location")
		if loc != "/idempotency/status?operation=payment.charge" || p.StatusURL != loc {
			t.Fatalf("409 does not point to the status: Location %q, status_url %q", loc, p.StatusURL)
		}
		if d := statusDoc(t, w.do("GET", loc, "tok-a", []string{"k-status"}, "")); d.State != "processing" || d.Response != nil || d.RetryAfterSeconds < 1 {
			t.Fatalf("while processing: %+v", d)
		}
		release()
		first := <-done
		d := statusDoc(t, w.do("GET", loc, "tok-a", []string{"k-status"}, ""))
		replay := w.post("/charge", "tok-a", []string{"k-status"}, pay)
		if d.State != "completed" || d.Response == nil || d.Response.Status != 201 || string(d.Response.Body) != first.body ||
			d.Response.Headers["Location"] != replay.header.Get("Location") || d.ResourceID != "pay_1" || string(d.Response.Body) != replay.body {
			t.Fatalf("completed: %+v (first %s)", d, first.body)
		}
		other := w.do("GET", loc, "tok-b", []string{"k-status"}, "")
		missing := w.do("GET", loc, "tok-a", []string{"k-none"}, "")
		if other.status != 404 || problemType(t, other) != "key-not-found" || other.body != missing.body {
			t.Fatalf("another tenant's key %d %s, a missing one %d %s", other.status, other.body, missing.status, missing.body)
		}
		if r := w.do("GET", loc, "tok-a", nil, ""); r.status != 400 || problemType(t, r) != "key-malformed" {
			t.Fatalf("no key: %+v", r)
		}
		if r := w.do("GET", "/idempotency/status", "tok-a", []string{"k-status"}, ""); r.status != 400 || problemType(t, r) != "invalid-field" {
			t.Fatalf("no operation: %+v", r)
		}
		if r := w.do("GET", loc, "", []string{"k-status"}, ""); r.status != 401 {
			t.Fatalf("no credential: %+v", r)
		}
	})
}

// The published key policy follows the live retention policy: the document a service mounts,
// the 400 key problems and the 410 all say the same periods.
func TestKeyPolicy_PublishedFromTheLiveRetentionPolicy(t *testing.T) {
	eachFlavor(t, func(t *testing.T, flavor string) {
		w := newWorldOn(t, flavor)
		policy := func() *httpidem.KeyPolicy {
			r := w.do("GET", "/idempotency/policy", "", nil, "")
			var p httpidem.KeyPolicy
			if r.status != 200 || json.Unmarshal([]byte(r.body), &p) != nil {
				t.Fatalf("policy: %d %s", r.status, r.body)
			}
			return &p
		}
		term := func(p *httpidem.KeyPolicy, state claim.State) httpidem.RetentionTerm {
			for _, rt := range p.Retention {
				if rt.Operation == "payment.charge" && rt.State == string(state) {
					return rt
				}
			}
			t.Fatalf("no %s term in %+v", state, p.Retention)
			return httpidem.RetentionTerm{}
		}
		before := policy()
		sc := w.store.Config()
		if got := term(before, claim.StateCompleted); got.KeepResultSeconds != int64(sc.KeepResponse.Seconds()) || got.KeepKeySeconds != int64(sc.KeepKey.Seconds()) {
			t.Fatalf("default terms %+v, store %v/%v", got, sc.KeepResponse, sc.KeepKey)
		}
		if before.Format.MaxLength != claim.MaxKeyLen || before.Header != "Idempotency-Key" || !strings.Contains(before.GeneratedBy, "client") ||
			!strings.Contains(before.StatusURL, "/idempotency/status") || before.SameKeyOtherRequest == "" {
			t.Fatalf("policy text: %+v", before)
		}
		if err := retention.SavePolicy(t.Context(), w.db, retention.Policy{Operation: "payment.charge", State: claim.StateCompleted,
			KeepResponse: 5 * 24 * time.Hour, KeepKey: 40 * 24 * time.Hour}, "test"); err != nil {
			t.Fatal(err)
		}
		after := term(policy(), claim.StateCompleted)
		if after.KeepResultSeconds != 5*86400 || after.KeepKeySeconds != 40*86400 || after.KeepResult != "5d" || after.KeepKey != "40d" {
			t.Fatalf("after the policy change: %+v", after)
		}
		keyProblem := func(r resp, want string) {
			t.Helper()
			var p httpidem.Problem
			if problemType(t, r) != want || json.Unmarshal([]byte(r.body), &p) != nil || p.KeyPolicy == nil || p.PolicyURL != "/idempotency/policy" {
				t.Fatalf("%s: %s", want, r.body)
			}
			if got := term(p.KeyPolicy, claim.StateCompleted); got != after {
				t.Fatalf("%s carries %+v, the policy says %+v", want, got, after)
			}
		}
		keyProblem(w.post("/charge", "tok-a", nil, pay), "key-missing")
		keyProblem(w.post("/charge", "tok-a", []string{strings.Repeat("k", 300)}, pay), "key-malformed")
		if r := w.post("/charge", "tok-a", []string{"old"}, pay); r.status != 201 {
			t.Fatal(r)
		}
		pgtest.Exec(t, w.db, `UPDATE idempotency_keys SET response_day = NULL, response_expires_at = now() - interval '1 s'`)
		keyProblem(w.post("/charge", "tok-a", []string{"old"}, pay), "result-expired")
	})
}

// docs/SERVICE.md publishes the key policy as built from the code with the default retention;
// this keeps the copy from drifting.
func TestKeyPolicy_ServiceDocIsTheDefaultPolicy(t *testing.T) {
	store, err := claim.NewStore(nil, claim.Config{DigestSecret: []byte("0123456789abcdef-secret")})
	if err != nil {
		t.Fatal(err)
	}
	p, err := httpidem.BuildKeyPolicy(t.Context(), httpidem.Config{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../../docs/SERVICE.md")
	if err != nil {
		t.Fatal(err)
	}
	if want := p.Markdown(); !strings.Contains(string(doc), want) {
		t.Fatalf("docs/SERVICE.md does not publish the key policy; it should contain:\n%s", want)
	}
}
