package claim_test

import (
	"errors"
	"testing"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

// TestFingerprint_DeclaredFieldsAreNormalisedLikeTheStoredRequest: the key stores the currency
// upper-cased, so "cny" and then "CNY" under one key are one intent — a replay, not 422
// key-reused; so are " alice " and "alice", and 100.0 and 1e2 and 100.
func TestFingerprint_DeclaredFieldsAreNormalisedLikeTheStoredRequest(t *testing.T) {
	b := setup(t)
	op := newFakeOp()
	first, err := b.store.Run(ctx, op, claim.Request{Tenant: "t1", Key: "k-case",
		Intent: []byte(`{"amount_minor": 100, "currency": "cny", "payee": " alice "}`)})
	if err != nil || first.Kind != claim.Completed {
		t.Fatalf("first: %+v %v", first, err)
	}
	for _, body := range []string{
		`{"amount_minor": 100, "currency": "CNY", "payee": "alice"}`,
		`{"amount_minor": 100.0, "currency": "Cny", "payee": "alice"}`,
		`{"amount_minor": 1e2, "currency": "cny", "payee": "alice "}`,
	} {
		out, err := b.store.Run(ctx, op, claim.Request{Tenant: "t1", Key: "k-case", Intent: []byte(body)})
		if err != nil || out.Kind != claim.Replay {
			t.Errorf("%s: %+v %v; want the first answer replayed", body, out, err)
		}
	}
	if n := op.executes.Load(); n != 1 {
		t.Fatalf("executed %d times; want 1", n)
	}
}

// TestFingerprint_VersionOneKeysStillMatchTheirRetries: a key made by the version-1
// canonicalizer (currency as sent) is compared by recomputing its stored request: its retry,
// with either case, replays.
func TestFingerprint_VersionOneKeysStillMatchTheirRetries(t *testing.T) {
	b := setup(t)
	op := newFakeOp()
	body := []byte(`{"amount_minor": 100, "currency": "cny", "payee": "alice"}`)
	first, err := b.store.Run(ctx, op, claim.Request{Tenant: "t1", Key: "k-v1", Intent: body})
	if err != nil || first.Kind != claim.Completed {
		t.Fatalf("first: %+v %v", first, err)
	}
	v1, err := claim.Canonicalize(body, claim.IntentSpec{Ignore: op.Intent().Ignore}) // the currency as sent
	if err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, b.db, `UPDATE idempotency_keys SET fingerprint = ?, fingerprint_version = 1, request = ?::jsonb WHERE id = ?`,
		v1.Fingerprint, string(v1.Canonical), first.KeyID)
	for _, c := range []string{"cny", "CNY"} {
		out, err := b.store.Run(ctx, op, claim.Request{Tenant: "t1", Key: "k-v1",
			Intent: []byte(`{"amount_minor": 100, "currency": "` + c + `", "payee": "alice"}`)})
		if err != nil || out.Kind != claim.Replay {
			t.Errorf("retry with %s: %+v %v; want a replay", c, out, err)
		}
	}
}

// TestIntentSpec_CheckRefusesIgnoringIntent: amount, currency, payee, items and quantities always
// count, so a spec that ignores one, or keeps an Only list without the declared amount or
// currency, is refused naming the entry.
func TestIntentSpec_CheckRefusesIgnoringIntent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		spec  claim.IntentSpec
		field string
	}{
		{claim.IntentSpec{Ignore: []string{"description", "payee"}}, "ignore[1]"},
		{claim.IntentSpec{Ignore: []string{"order.items"}}, "ignore[0]"},
		{claim.IntentSpec{Ignore: []string{"line_qty"}}, "ignore[0]"},
		{claim.IntentSpec{Ignore: []string{"meta"}, AmountField: "meta.total"}, "ignore[0]"},
		{claim.IntentSpec{Only: []string{"payee"}, CurrencyField: "ccy"}, "only"},
		{claim.IntentSpec{Only: []string{"payee", "money"}, AmountField: "money.minor"}, ""},
		{claim.IntentSpec{Ignore: []string{"description", "client_ts", "meta.trace_id"}, AmountField: "amount_minor", CurrencyField: "currency"}, ""},
	} {
		err := tc.spec.Check()
		fe := (*errs.FieldError)(nil)
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%+v refused: %v", tc.spec, err)
		case tc.field != "" && (!errors.As(err, &fe) || fe.Name != tc.field || !errors.Is(err, claim.ErrInvalidIntent)):
			t.Errorf("%+v: %v; want a refusal naming %s", tc.spec, err, tc.field)
		}
	}
}

// TestFingerprint_UnknownFieldsCountAsIntent: the claim layer fingerprints every field an
// operation does not declare non-intent, so a retry that adds a field nobody declared is another
// intent, never a replay of the first answer.
func TestFingerprint_UnknownFieldsCountAsIntent(t *testing.T) {
	b := setup(t)
	op := newFakeOp()
	if _, err := b.store.Run(ctx, op, claim.Request{Tenant: "t1", Key: "k-extra",
		Intent: []byte(`{"amount_minor": 100, "currency": "CNY", "payee": "alice"}`)}); err != nil {
		t.Fatal(err)
	}
	out, err := b.store.Run(ctx, op, claim.Request{Tenant: "t1", Key: "k-extra",
		Intent: []byte(`{"amount_minor": 100, "currency": "CNY", "payee": "alice", "payee_iban": "DE00"}`)})
	if err != nil || out.Kind != claim.Mismatch || op.executes.Load() != 1 {
		t.Fatalf("%+v %v (executes %d); want a mismatch", out, err, op.executes.Load())
	}
}
