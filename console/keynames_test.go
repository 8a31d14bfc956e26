package console

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/audit"
)

// TestKeyNames_ReplaysBulkAndAuditNameKeysAsPeopleKnowThem: replay requests, bulk items and audit
// targets name a key as tenant · operation · key, truncated with the full key in the title and a
// copy button, linked by id; the raw key never goes into a URL, and a key the operator may not
// see (or one that is gone) is named by its id only.
func TestKeyNames_ReplaysBulkAndAuditNameKeysAsPeopleKnowThem(t *testing.T) {
	b := setup(t)
	o := b.addOperator("o", access.RoleOperator, "acme")
	b.addOperator("adm", access.RoleAdmin, "acme")
	long := "cust-quoted-key-ACME-1234567890-abcdef"
	k := b.seedFailed("acme", long, `{"amount":100,"currency":"USD"}`, true)
	g := b.seedFailed("globex", "globex-secret-key", `{"amount":100,"currency":"USD"}`, true)
	var ids []int64
	if err := b.db.Raw(`INSERT INTO replay_requests (key_id, tenant, key_digest, key_version, token_hash, requested_by, requester,
		reason, preview, needs_approval, state, outcome) VALUES (?, 'acme', ?, 1, '\x01', ?, 'o', 'customer called', 'the charge', false,
		'executed', 'sent') RETURNING id`, k.ID, k.KeyDigest, o.ID).Scan(&ids).Error; err != nil {
		t.Fatal(err)
	}
	req := ids[0]
	var runs []int64
	if err := b.db.Raw(`INSERT INTO replay_bulk_runs (operator_id, operator, filter, total) VALUES (?, 'o', 'tenant=acme', 1) RETURNING id`,
		o.ID).Scan(&runs).Error; err != nil {
		t.Fatal(err)
	}
	b.exec(`INSERT INTO replay_bulk_items (run_id, seq, key_id, key_version, key_state, predicted) VALUES (?, 1, ?, 1, 'failed_retryable', 'send')`,
		runs[0], k.ID)
	ctx := context.Background()
	for _, target := range []string{fmt.Sprintf("key:%d", k.ID), "key:999999"} {
		if err := b.srv.audit.Append(ctx, nil, audit.Entry{Actor: "operator:o", Action: "key.reveal", Target: target, Tenants: []string{"acme"}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.srv.audit.Append(ctx, nil, audit.Entry{Actor: "operator:x", Action: "key.reveal", Target: fmt.Sprintf("key:%d", g.ID),
		Tenants: []string{"globex"}}); err != nil {
		t.Fatal(err)
	}

	name := fmt.Sprintf(`<a href="/keys/%d" translate="no">acme · payment.charge · <span class="mono" title="%s">cust-quoted-key-ACME-123…</span></a>`, k.ID, long)
	copyBtn := fmt.Sprintf(`data-copy="%s"`, long)
	c := b.signIn("o")
	pages := map[string]string{
		"replays":      "/replays",
		"replay":       fmt.Sprintf("/replays/%d", req),
		"bulk":         fmt.Sprintf("/replays/bulk/%d", runs[0]),
		"bulk partial": fmt.Sprintf("/replays/bulk/%d/progress", runs[0]),
		"preview":      fmt.Sprintf("/keys/%d/replay", k.ID),
	}
	for what, path := range pages {
		got := c.get(path)
		if got.Status != 200 {
			t.Fatalf("%s: %d", path, got.Status)
		}
		mustContain(t, what, got.Body, name, copyBtn)
		noKeyInURL(t, what, got.Body, "ACME-1234567890")
	}
	mustContain(t, "replay page", c.get(fmt.Sprintf("/replays/%d", req)).Body, fmt.Sprintf(`href="/reconcile/findings?key=%d"`, k.ID))
	mustContain(t, "layout", c.get("/replays").Body, `<script src="/static/copy.js" defer></script>`)
	if js := c.get("/static/copy.js"); js.Status != 200 || !strings.Contains(js.Body, "data-copy") {
		t.Errorf("copy.js: %d", js.Status)
	}

	audit := b.signIn("adm").get("/audit")
	if audit.Status != 200 {
		t.Fatalf("audit: %d", audit.Status)
	}
	mustContain(t, "audit", audit.Body, name, copyBtn, `<span class="keyname muted">key #999999</span>`)
	mustNotContain(t, "audit", audit.Body, "globex-secret-key")
	noKeyInURL(t, "audit", audit.Body, "ACME-1234567890")
}

// noKeyInURL fails when part of a raw key appears in a link, form action or htmx URL.
func noKeyInURL(t *testing.T, what, body, part string) {
	t.Helper()
	for _, m := range hrefPattern.FindAllStringSubmatch(body, -1) {
		if strings.Contains(m[1], part) {
			t.Errorf("%s: the raw key went into a URL: %s", what, m[1])
		}
	}
}
