package console

import (
	"fmt"
	"testing"

	"github.com/idemops/idemops/access"
)

// TestKeyRelated_KeyPageLinksItsReplayRequestsFindingsAndStatementLine: a key with a replay
// request (confirmed through the API, so its history holds the replay_requested event) and a
// reconciliation finding lists both under "Related", the finding with its run and statement
// line; the timeline's replay event links to its request, the request's page links back to the
// key's history; another tenant's operator gets 404 for the key and sees none of it.
func TestKeyRelated_KeyPageLinksItsReplayRequestsFindingsAndStatementLine(t *testing.T) {
	b := setup(t)
	b.addOperator("olga", access.RoleOperator, "acme")
	b.addOperator("gus", access.RoleOperator, "globex")
	b.addOperator("vera", access.RoleViewer, "acme")
	tok := b.token("olga")
	k := b.seedKey("acme", "payment.charge", "rel-1", `{"amount":1234,"currency":"CNY","payee":"alice"}`, false)
	b.exec(`UPDATE idempotency_keys SET lease_owner = NULL, lease_token = NULL, not_found_at = now() - interval '1 hour',
		lease_expires_at = now() - interval '1 second' WHERE id = ?`, k.ID)
	other := b.seedKey("acme", "payment.charge", "rel-other", `{"amount":5,"currency":"EUR"}`, true)

	c := b.signIn("olga")
	p := decode[apiPreview](t, c.api(fmt.Sprintf("/api/v1/keys/%d/replay", k.ID), tok))
	if !p.Allowed {
		t.Fatalf("preview: %+v", p)
	}
	a := c.apiPost(fmt.Sprintf("/api/v1/keys/%d/replay", k.ID), tok, map[string]string{"token": p.Token, "reason": "customer called"})
	if a.Status != 201 {
		t.Fatalf("confirm: %d %s", a.Status, a.Body)
	}
	req := decode[apiConfirm](t, a).Request.ID

	b.setChannel("stripe", "acme")
	run := b.seedReconRun("stripe")
	f := b.seedFinding(run, "AMOUNT_MISMATCH", fmt.Sprintf("key:%d", k.ID), &k.ID, `{"line": 7, "channel_status": "success"}`)
	fOther := b.seedFinding(run, "LOCAL_ONLY", fmt.Sprintf("key:%d", other.ID), &other.ID, `{}`)

	page := c.get(fmt.Sprintf("/keys/%d", k.ID))
	if page.Status != 200 {
		t.Fatalf("key page: %d", page.Status)
	}
	related := between(t, page.Body, `<section id="related">`, "</section>")
	mustContain(t, "related", related,
		fmt.Sprintf(`href="/replays/%d" class="related-replay">replay request #%d</a>`, req, req),
		fmt.Sprintf(`href="/reconcile/findings?key=%d#finding-%d" class="related-finding">finding #%d</a>`, k.ID, f, f),
		"AMOUNT_MISMATCH",
		fmt.Sprintf(`href="/reconcile/runs/%d" class="related-run">run %d</a>`, run, run),
		fmt.Sprintf(`href="/reconcile/runs/%d/line?n=7" class="related-line">statement line 7</a>`, run),
		fmt.Sprintf(`href="/reconcile/findings?key=%d" id="related-findings-all"`, k.ID))
	mustNotContain(t, "related of another key", related, fmt.Sprintf("finding #%d<", fOther))

	// The timeline: the replay_requested event links to its request; the anchor #history exists.
	history := between(t, page.Body, `<ol class="timeline" id="history">`, "</ol>")
	ev := between(t, history, `<li class="event event-replay_requested">`, "</li>")
	mustContain(t, "replay event", ev, fmt.Sprintf(`<a href="/replays/%d" class="event-link event-request">replay request #%d</a>`, req, req))

	// The request's page names the key and links back to its history and findings.
	mustContain(t, "replay page", c.get(fmt.Sprintf("/replays/%d", req)).Body,
		fmt.Sprintf(`href="/keys/%d#history" class="key-history"`, k.ID), fmt.Sprintf(`href="/reconcile/findings?key=%d"`, k.ID))

	// A viewer sees the request named but not linked (the replay pages are an operator's).
	vp := b.signIn("vera").get(fmt.Sprintf("/keys/%d", k.ID))
	if vp.Status != 200 {
		t.Fatalf("viewer key page: %d", vp.Status)
	}
	mustContain(t, "viewer related", vp.Body, fmt.Sprintf(`<span class="related-replay">replay request #%d</span>`, req),
		fmt.Sprintf(`class="related-finding">finding #%d</a>`, f))
	mustNotContain(t, "viewer related", vp.Body, fmt.Sprintf(`href="/replays/%d"`, req))

	// Another tenant's operator: 404 for the key, and nothing of its request or finding.
	g := b.signIn("gus").get(fmt.Sprintf("/keys/%d", k.ID))
	if g.Status != 404 {
		t.Fatalf("another tenant's operator: %d, want 404", g.Status)
	}
	mustNotContain(t, "other tenant", g.Body, fmt.Sprintf("replay request #%d", req), fmt.Sprintf("finding #%d", f))
}
