package console

import (
	"fmt"
	"testing"

	"github.com/idemops/idemops/claim"
)

// summaryOp is fakeOp declaring the non-sensitive fields of its intent, as the demo's payment does.
type summaryOp struct{ *fakeOp }

func (summaryOp) Intent() claim.IntentSpec {
	return claim.IntentSpec{AmountField: "amount", CurrencyField: "currency",
		Summary: []string{"amount", "currency", "payee", "merchant_order_no"}}
}

// withSummaryOps registers payment.charge with a declared summary and refund.plain without one.
func withSummaryOps(c *Config) {
	pay := summaryOp{&fakeOp{name: "payment.charge", found: map[string]string{}}}
	plain := &fakeOp{name: "refund.plain", found: map[string]string{}}
	c.Operations = func(name string) (claim.Operation, bool) {
		switch name {
		case pay.name:
			return pay, true
		case plain.name:
			return plain, true
		}
		return nil, false
	}
}

func TestKeyPage_IntentSummaryShowsDeclaredFieldsWithoutReveal(t *testing.T) {
	t.Parallel()
	b := newBundle(t, withSummaryOps)
	b.addOperator("v", RoleViewer, "*")
	c := b.signIn("v")
	intent := `{"amount":12345,"currency":"IDR","payee":"Toko Budi","merchant_order_no":"MO-77","card":"4111-SECRET"}`
	k := b.seedKey("acme", "payment.charge", "sum-1", intent, true)
	page := c.get(fmt.Sprintf("/keys/%d", k.ID))
	if page.Status != 200 {
		t.Fatalf("key page: %d", page.Status)
	}
	// IDR has two minor-unit digits (ISO 4217): 12345 is 123.45, never "12345 IDR".
	mustContain(t, "summary", page.Body, `id="intent-summary"`, "123.45 IDR", "Toko Budi", "MO-77", "merchant order no")
	mustNotContain(t, "summary", page.Body, "4111-SECRET", "12345 IDR")

	// An operation that declares nothing shows no summary, and nothing of its request.
	k2 := b.seedKey("acme", "refund.plain", "sum-2", `{"amount":500,"currency":"JPY","payee":"Hidden Payee"}`, true)
	page = c.get(fmt.Sprintf("/keys/%d", k2.ID))
	mustNotContain(t, "undeclared summary", page.Body, `id="intent-summary"`, "Hidden Payee")
}
