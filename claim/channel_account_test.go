package claim_test

import (
	"context"
	"strings"
	"testing"

	"github.com/idemops/idemops/claim"
)

// routedOp is fakeOp whose Execute tells the lease which channel account it charges through,
// the way downstream.PaysimCharge does, before its call.
type routedOp struct {
	*fakeOp
	account string
}

func (o *routedOp) Execute(ctx context.Context, l *claim.Lease) (*claim.Document, error) {
	l.ChannelAccount = o.account
	return o.fakeOp.Execute(ctx, l)
}

func (b *bundle) channelAccount(keyID int64) string {
	b.t.Helper()
	k, err := b.store.Get(context.Background(), keyID)
	if err != nil {
		b.t.Fatal(err)
	}
	if k.ChannelAccount == nil {
		return ""
	}
	return *k.ChannelAccount
}

// TestLease_ChannelAccountIsRecordedWithTheKeysEnd: the channel account a holder says its
// downstream call went through is kept on the key — with a completion, and with a failure whose
// outcome is unknown (the charge may be there) — and a later holder that does not say keeps it.
func TestLease_ChannelAccountIsRecordedWithTheKeysEnd(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	op := &routedOp{fakeOp: newFakeOp(), account: "wechat-1900000109"}

	out, err := b.store.Run(ctx, op, req("k-done", payment(100)))
	if err != nil || out.Kind != claim.Completed {
		t.Fatalf("run: %+v %v", out, err)
	}
	if got := b.channelAccount(out.KeyID); got != "wechat-1900000109" {
		t.Fatalf("completed key's channel account %q, want wechat-1900000109", got)
	}
	evs, err := b.store.History(ctx, out.KeyID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if last := evs[len(evs)-1]; last.Kind != "completed" || string(last.Detail) == "" ||
		!strings.Contains(string(last.Detail), `"channel_account": "wechat-1900000109"`) {
		t.Fatalf("completion event %s %s does not name the account", last.Kind, last.Detail)
	}

	// The answer is lost after the channel charged: the key fails retryably, with the account.
	op.crashAfterExecute = true
	out, err = b.store.Run(ctx, op, req("k-lost", payment(200)))
	if err != nil || out.State != claim.StateFailedRetryable {
		t.Fatalf("run with a lost answer: %+v %v", out, err)
	}
	if got := b.channelAccount(out.KeyID); got != "wechat-1900000109" {
		t.Fatalf("failed key's channel account %q, want the one the call went through", got)
	}
	// The retry finds the charge by a lookup that does not say where it is: the recorded account stays.
	lookupOnly := newFakeOp()
	lookupOnly.docs = op.docs
	out2, err := b.store.Run(ctx, lookupOnly, req("k-lost", payment(200)))
	if err != nil || out2.Kind != claim.Recovered {
		t.Fatalf("retry: %+v %v", out2, err)
	}
	if lookupOnly.executes.Load() != 0 {
		t.Fatalf("the retry executed %d times; the charge was there", lookupOnly.executes.Load())
	}
	if got := b.channelAccount(out.KeyID); got != "wechat-1900000109" {
		t.Fatalf("recovered key's channel account %q: a holder that does not say must keep the recorded one", got)
	}

	// A holder that never says leaves the key without one.
	plain := newFakeOp()
	out, err = b.store.Run(ctx, plain, req("k-plain", payment(300)))
	if err != nil || out.Kind != claim.Completed {
		t.Fatalf("run: %+v %v", out, err)
	}
	if got := b.channelAccount(out.KeyID); got != "" {
		t.Fatalf("key of a holder that did not say: channel account %q, want none", got)
	}
	if n := b.count(`SELECT count(*) FROM idempotency_keys WHERE channel_account IS NULL`); n != 1 {
		t.Fatalf("%d keys without an account, want 1", n)
	}
}
