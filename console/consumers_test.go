package console

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/claim"
)

// TestConsumers_PageIsTenantScoped: the Consumers page counts processed and dropped deliveries
// per consumer and tenant, spanning work in processing and stuck, a business key's deliveries
// and the daemon's compensations — each only for the tenants the operator may see.
func TestConsumers_PageIsTenantScoped(t *testing.T) {
	b := setup(t)
	b.addOperator("vic", access.RoleViewer, "acme")
	b.addOperator("ada", access.RoleAdmin, "*")
	ctx := context.Background()
	for _, c := range []claim.Consumed{
		{Consumer: "fulfillment", Tenant: "acme", BusinessKey: "pay_acme_1", MessageID: "m1"},
		{Consumer: "fulfillment", Tenant: "acme", BusinessKey: "pay_acme_1", MessageID: "m2"}, // dropped
		{Consumer: "fulfillment", Tenant: "acme", BusinessKey: "pay_acme_2", MessageID: "m3"},
		{Consumer: "fulfillment", Tenant: "globex", BusinessKey: "pay_globex_1", MessageID: "m4"},
	} {
		if _, err := claim.RecordConsumed(ctx, b.db, c); err != nil {
			t.Fatal(err)
		}
	}
	// Spanning work: one acme record stuck in processing (its lease ran out), compensated.
	out, err := b.claims.Claim(ctx, claim.Request{Tenant: "acme", Operation: "fulfillment.ship", Key: "pay_acme_3",
		Intent: json.RawMessage(`{"payment_id":"pay_acme_3"}`), Actor: "consumer:shipper"})
	if err != nil || out.Kind != claim.Acquired {
		t.Fatalf("claim: %v %+v", err, out)
	}
	b.db.Exec(`UPDATE idempotency_keys SET lease_expires_at = now() - interval '1 minute' WHERE id = ?`, out.KeyID)
	b.db.Exec(`INSERT INTO key_events (key_id, kind, actor, detail) VALUES (?, 'taken_over', 'daemon', '{}')`, out.KeyID)
	gout, err := b.claims.Claim(ctx, claim.Request{Tenant: "globex", Operation: "fulfillment.ship", Key: "pay_globex_9",
		Intent: json.RawMessage(`{"payment_id":"pay_globex_9"}`), Actor: "consumer:shipper"})
	if err != nil || gout.Kind != claim.Acquired {
		t.Fatalf("claim: %v %+v", err, gout)
	}
	b.db.Exec(`INSERT INTO key_events (key_id, kind, actor, detail) VALUES (?, 'taken_over', 'daemon', '{}')`, gout.KeyID)

	vic := b.signIn("vic")
	page := vic.get("/consumers").Body
	mustContain(t, "viewer's consumers page", page, `id="consumer-stats"`, "fulfillment", "shipper", "pay_acme_3",
		`<td class="num">2</td><td class="num">1</td>`, "the daemon compensates")
	mustNotContain(t, "viewer's consumers page", page, "globex")
	mustContain(t, "a business key's deliveries", vic.get("/consumers?key=pay_acme_1").Body, `id="deliveries"`, `<td class="mono">m1</td>`)
	other := vic.get("/consumers?key=pay_globex_1").Body
	mustContain(t, "another tenant's key", other, `id="no-deliveries"`)
	// The message id as the deliveries table writes it: a bare "m4" also turns up now and then in
	// the page's random CSRF token.
	mustNotContain(t, "another tenant's key", other, `<td class="mono">m4</td>`)

	ada := b.signIn("ada")
	mustContain(t, "admin's consumers page", ada.get("/consumers").Body, "globex", "pay_globex_9")
}
