package claim_test

import (
	"testing"

	"github.com/idemops/idemops/claim"
)

// BenchmarkCanonicalize is the client-side cost of every claim: canonical form, fingerprint,
// digest and downstream key of a typical payment request.
func BenchmarkCanonicalize(b *testing.B) {
	spec := claim.IntentSpec{AmountField: "amount_minor", CurrencyField: "currency", Ignore: []string{"description", "client_ts"}}
	body := []byte(`{"amount_minor": 1234, "currency": "CNY", "merchant_order_no": "ord-1", "payee": "alice", "description": "book", "client_ts": "2026-12-02T10:00:00Z"}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := claim.Canonicalize(body, spec); err != nil {
			b.Fatal(err)
		}
		claim.Digest(secret, "acme", "payment.charge", "order-7")
		claim.DownstreamKey("acme", "payment.charge", "order-7")
	}
}
