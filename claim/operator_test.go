package claim_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/keys"
)

// TestMarkFinal_OnlyWithoutALiveLeaseAndAtTheSeenVersion: an operator's mark-final is a
// compare-and-set on the version they saw, refused while a holder's lease is live, and recorded
// in the key's history by the same statement.
func TestMarkFinal_OnlyWithoutALiveLeaseAndAtTheSeenVersion(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	out, err := b.store.Claim(ctx, req("mf-1", payment(100)))
	if err != nil {
		t.Fatal(err)
	}
	k, _ := b.store.Get(ctx, out.KeyID)
	err = keys.MarkFinal(ctx, b.store, nil, k.ID, k.Version, "operator:ada", "stuck")
	if !errors.Is(err, claim.ErrNotReplayable) || !strings.Contains(err.Error(), "live lease") {
		t.Fatalf("mark final under a live lease: %v, want ErrNotReplayable naming the lease", err)
	}
	b.expireLease(k.ID)
	if err := keys.MarkFinal(ctx, b.store, nil, k.ID, k.Version-1, "operator:ada", "stuck"); !errors.Is(err, claim.ErrKeyChanged) {
		t.Fatalf("mark final at a stale version: %v, want ErrKeyChanged", err)
	}
	if err := keys.MarkFinal(ctx, b.store, nil, k.ID, k.Version, "operator:ada", ""); err == nil {
		t.Fatal("mark final without a reason: accepted")
	}
	if err := keys.MarkFinal(ctx, b.store, nil, k.ID, k.Version, "operator:ada", "channel confirmed it never arrived"); err != nil {
		t.Fatal(err)
	}
	after, _ := b.store.Get(ctx, k.ID)
	if after.State != claim.StateFailedFinal || after.Version != k.Version+1 || after.LeaseOwner != nil {
		t.Errorf("after mark final: state %s version %d owner %v", after.State, after.Version, after.LeaseOwner)
	}
	evs, _ := b.store.History(ctx, k.ID, 0)
	last := evs[len(evs)-1]
	if last.Kind != "marked_final" || last.Actor != "operator:ada" || !strings.Contains(string(last.Detail), "never arrived") {
		t.Errorf("last event %s by %s %s", last.Kind, last.Actor, last.Detail)
	}
	if err := keys.MarkFinal(ctx, b.store, nil, k.ID, after.Version, "operator:ada", "again"); !errors.Is(err, claim.ErrNotReplayable) {
		t.Errorf("mark final of a failed_final key: %v, want ErrNotReplayable", err)
	}
}

// TestTakeoverAt_RefusesAKeyThatMovedOn: a confirmed replay takes the key over only at the
// version its preview saw.
func TestTakeoverAt_RefusesAKeyThatMovedOn(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	out, err := b.store.Claim(ctx, req("ta-1", payment(100)))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.store.Fail(ctx, nil, out.Lease, claim.RetryableFailure("timeout", "no answer")); err != nil {
		t.Fatal(err)
	}
	k, _ := b.store.Get(ctx, out.KeyID)
	if _, err := b.store.TakeoverAt(ctx, k.ID, k.Version-1, "operator:olga"); !errors.Is(err, claim.ErrKeyChanged) {
		t.Fatalf("takeover at a stale version: %v, want ErrKeyChanged", err)
	}
	l, err := b.store.TakeoverAt(ctx, k.ID, k.Version, "operator:olga")
	if err != nil {
		t.Fatal(err)
	}
	if !l.Retry || !l.MustCheckDownstream() || l.Actor != "operator:olga" {
		t.Errorf("lease: retry %v actor %s", l.Retry, l.Actor)
	}
	if _, err := b.store.TakeoverAt(ctx, k.ID, k.Version, "operator:olga"); !errors.Is(err, claim.ErrKeyChanged) {
		t.Errorf("second takeover with the same version: %v, want ErrKeyChanged", err)
	}
	held, _ := b.store.Get(ctx, k.ID)
	if r := held.ReplayRefusal(); !strings.Contains(r, "live lease") {
		t.Errorf("refusal of a held key: %q", r)
	}
}
