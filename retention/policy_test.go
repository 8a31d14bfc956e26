package retention_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/retention"
)

func TestSavePolicy_BelowTheFloorIsRefusedWithTheReason(t *testing.T) {
	b := setup(t)
	err := retention.SavePolicy(b.ctx, b.db, retention.Policy{Operation: "payment.charge", State: claim.StateCompleted,
		KeepResponse: day, KeepKey: 48 * time.Hour}, "operator:alice")

	var ie *errs.FieldError
	if !errors.Is(err, retention.ErrBelowFloor) || !errors.As(err, &ie) || ie.Name != "keep_key" {
		t.Fatalf("got %v, want an ErrBelowFloor input error on keep_key", err)
	}
	// The default floor: 24 h retry + 72 h back-fill + 48 h reconciliation lag = 6 days.
	if !strings.Contains(err.Error(), "6d") || !strings.Contains(err.Error(), "reconciliation lag 2d") {
		t.Errorf("reason %q does not name the floor and its parts", err)
	}
	if n := b.count(`SELECT count(*) FROM retention_policies`); n != 0 {
		t.Errorf("%d policies saved", n)
	}
	if err := retention.SavePolicy(b.ctx, b.db, retention.Policy{Operation: "payment.charge", State: claim.StateCompleted,
		KeepResponse: day, KeepKey: 6 * day}, "operator:alice"); err != nil {
		t.Errorf("a policy at the floor is refused: %v", err)
	}
}

func TestSavePolicy_BadInputIsATypedErrorAndNothingIsSaved(t *testing.T) {
	b := setup(t)
	for _, tc := range []struct {
		name  string
		p     retention.Policy
		field string
	}{
		{"negative response", retention.Policy{Operation: "*", State: claim.StateCompleted, KeepResponse: -time.Hour, KeepKey: 10 * day}, "keep_response"},
		{"negative key", retention.Policy{Operation: "*", State: claim.StateCompleted, KeepResponse: 0, KeepKey: -10 * day}, "keep_key"},
		{"response outlives key", retention.Policy{Operation: "*", State: claim.StateCompleted, KeepResponse: 20 * day, KeepKey: 10 * day}, "keep_response"},
		{"unknown state", retention.Policy{Operation: "*", State: "done", KeepResponse: day, KeepKey: 10 * day}, "state"},
		{"processing", retention.Policy{Operation: "*", State: claim.StateProcessing, KeepResponse: day, KeepKey: 10 * day}, "state"},
		{"empty operation", retention.Policy{State: claim.StateCompleted, KeepResponse: day, KeepKey: 10 * day}, "operation"},
		{"fractional seconds", retention.Policy{Operation: "*", State: claim.StateCompleted, KeepResponse: 1500 * time.Millisecond, KeepKey: 10 * day}, "keep_response"},
		{"beyond ten years", retention.Policy{Operation: "*", State: claim.StateCompleted, KeepResponse: day, KeepKey: 4000 * day}, "keep_key"},
	} {
		err := retention.SavePolicy(b.ctx, b.db, tc.p, "operator:alice")
		var ie *errs.FieldError
		if !errors.Is(err, retention.ErrInvalidPolicy) || !errors.As(err, &ie) || ie.Name != tc.field {
			t.Errorf("%s: got %v, want ErrInvalidPolicy on %s", tc.name, err, tc.field)
		}
	}
	if n := b.count(`SELECT count(*) FROM retention_policies`); n != 0 {
		t.Errorf("%d policies saved from bad input", n)
	}
}

func TestSetFloor_AboveAnExistingPolicyIsRefused(t *testing.T) {
	b := setup(t)
	if err := retention.SavePolicy(b.ctx, b.db, retention.Policy{Operation: "payment.refund", State: claim.StateCompleted,
		KeepResponse: day, KeepKey: 10 * day}, "operator:alice"); err != nil {
		t.Fatal(err)
	}
	err := retention.SetFloor(b.ctx, b.db, retention.Floor{ClientRetry: day, Backfill: 7 * day, ReconciliationLag: 3 * day}, "operator:alice")
	if !errors.Is(err, retention.ErrBelowFloor) || !strings.Contains(err.Error(), "payment.refund/completed") {
		t.Fatalf("got %v, want ErrBelowFloor naming the policy", err)
	}
	if err := retention.SetFloor(b.ctx, b.db, retention.Floor{ClientRetry: 2 * day, Backfill: 4 * day, ReconciliationLag: 3 * day}, "operator:bob"); err != nil {
		t.Fatal(err)
	}
	set, err := retention.ListPolicies(b.ctx, b.db)
	if err != nil {
		t.Fatal(err)
	}
	if set.Floor.Total() != 9*day || set.Floor.UpdatedBy != "operator:bob" || len(set.Policies) != 1 || set.Policies[0].KeepKey != 10*day {
		t.Errorf("policy set: %+v", set)
	}
}

func TestPurge_FloorHoldsWhateverTheStampsSay(t *testing.T) {
	b := setup(t)
	id := b.key("payment.charge", "k", claim.StateCompleted)
	// A service configured with a key period shorter than the floor stamped this key.
	b.age(id, 3*day)
	b.purge(retention.Options{})
	if !b.exists(id) {
		t.Fatal("a key younger than the floor was deleted")
	}
}

func TestParsePeriod_ReadsHoursAndDays(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Duration{"72h": 72 * time.Hour, "30d": 30 * day, "1h30m": 90 * time.Minute, "0": 0} {
		got, err := retention.ParsePeriod(in)
		if err != nil || got != want {
			t.Errorf("ParsePeriod(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
	for d, want := range map[time.Duration]string{72 * time.Hour: "3d", 36 * time.Hour: "36h", 0: "0", 90 * time.Minute: "1h30m0s"} {
		if got := retention.FormatPeriod(d); got != want {
			t.Errorf("FormatPeriod(%s) = %q, want %q", d, got, want)
		}
	}
	for _, bad := range []string{"", "3x", "d", "1.5d", "99999d"} {
		if _, err := retention.ParsePeriod(bad); err == nil {
			t.Errorf("ParsePeriod(%q) accepted", bad)
		}
	}
}
