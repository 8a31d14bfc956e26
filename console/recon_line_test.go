package console

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/idemops/idemops/access"
)

// TestReconLinePage_AFindingLinksToItsStatementLine: a finding's "line N" opens that line of the
// run's statement as the channel stated it (transaction, order number, amount formatted, raw
// text), linked back to the findings; a bad line number is a 400 naming n, a missing one 404,
// and an operator outside the channel account's tenants does not find the run's lines.
func TestReconLinePage_AFindingLinksToItsStatementLine(t *testing.T) {
	b := setup(t)
	b.addOperator("root", access.RoleAdmin, "*")
	b.addOperator("g", access.RoleViewer, "globex")
	file, err := os.ReadFile("../reconcile/testdata/stripe/itemized.csv")
	if err != nil {
		t.Fatal(err)
	}
	c := b.signIn("root")
	if got := c.upload("/reconcile/upload", map[string]string{"channel": "stripe", "format": "stripe", "csrf": c.csrf}, file); got.Status != 303 {
		t.Fatalf("upload: %d %s", got.Status, truncate(got.Body, 200))
	}
	run := b.count(`SELECT max(id) FROM recon_runs`)
	findings := c.get(fmt.Sprintf("/reconcile/findings?run=%d", run)).Body
	prefix := fmt.Sprintf(`href="/reconcile/runs/%d/line?n=`, run)
	i := strings.Index(findings, prefix)
	if i < 0 {
		t.Fatalf("no finding links to its statement line:\n%s", truncate(findings, 600))
	}
	n := findings[i+len(prefix) : i+len(prefix)+strings.IndexByte(findings[i+len(prefix):], '"')]
	page := c.get(fmt.Sprintf("/reconcile/runs/%d/line?n=%s", run, n))
	if page.Status != 200 {
		t.Fatalf("line %s: %d", n, page.Status)
	}
	var order, txn string
	b.db.Raw(`SELECT l.merchant_order_no FROM statement_lines l JOIN recon_runs r ON r.statement_id = l.statement_id
		WHERE r.id = ? AND l.line_no = ?`, run, n).Scan(&order)
	b.db.Raw(`SELECT l.channel_txn_id FROM statement_lines l JOIN recon_runs r ON r.statement_id = l.statement_id
		WHERE r.id = ? AND l.line_no = ?`, run, n).Scan(&txn)
	mustContain(t, "line page", page.Body, `id="statement-line"`, "Line "+n+" ", txn, order, `id="line-findings"`)
	if got := c.get(fmt.Sprintf("/reconcile/runs/%d/line?n=abc", run)); got.Status != 400 || !strings.Contains(got.Body, "n: must be a line number") {
		t.Errorf("bad n: %d", got.Status)
	}
	if got := c.get(fmt.Sprintf("/reconcile/runs/%d/line?n=99999", run)); got.Status != 404 {
		t.Errorf("missing line: %d, want 404", got.Status)
	}
	if got := b.signIn("g").get(fmt.Sprintf("/reconcile/runs/%d/line?n=%s", run, n)); got.Status != 404 {
		t.Errorf("an operator of globex only: %d, want 404", got.Status)
	}
}
