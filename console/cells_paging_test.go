package console

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/reconcile"
)

// idsNext reads an API page of the listing field ("purges", "runs") and its next_before.
func idsNext(t *testing.T, field string, got resp) ([]int64, string) {
	t.Helper()
	var p map[string]json.RawMessage
	if err := json.Unmarshal([]byte(got.Body), &p); err != nil {
		t.Fatalf("%s: %v", truncate(got.Body, 300), err)
	}
	var rows []struct {
		ID int64 `json:"id"` // a purge run's is "ID": the match is case-insensitive
	}
	if err := json.Unmarshal(p[field], &rows); err != nil {
		t.Fatalf("%s: %v", field, err)
	}
	ids := make([]int64, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	var next string
	if n := p["next_before"]; len(n) > 0 && string(n) != "null" {
		if err := json.Unmarshal(n, &next); err != nil {
			t.Fatalf("next_before %s: want a cursor of cells (a string)", n)
		}
	}
	return ids, next
}

// TestCells_APageAcrossCellsShowsItsWholeLimit: a page across cells shows as many rows as one
// database would — the API's largest page (500 purge runs, 500 recon runs) and the CLI's largest
// page of findings (1000) — and the walk still reaches every row of every cell, also when one
// cell holds them all and its store lists no more than that page at once (a cell asked for
// its store's most rows that came back full may have more: the cursor goes on).
func TestCells_APageAcrossCellsShowsItsWholeLimit(t *testing.T) {
	b := setupCells(t)
	root := b.addOperator("root", access.RoleAdmin, "*")
	c, tok := b.signIn("root"), b.token("root")
	t0 := time.Now().Add(-72 * time.Hour).Truncate(time.Second)

	// Purge runs: 600 in cell a, 3 in cell b.
	purges := `INSERT INTO purge_log (started_at, finished_at, dry_run, actor, status, deleted, batch_size)
		SELECT ?::timestamptz + i * interval '1 minute', ?::timestamptz + i * interval '1 minute', false, 'daemon', 'ok', 1, 1000
		FROM generate_series(1, ?) AS i`
	if err := b.db.Exec(purges, t0, t0, 600).Error; err != nil {
		t.Fatal(err)
	}
	if err := b.cb.Exec(purges, t0.Add(time.Hour), t0.Add(time.Hour), 3).Error; err != nil {
		t.Fatal(err)
	}
	// Recon runs: 250 in each cell, interleaved.
	runs := `INSERT INTO recon_runs (channel, bill_date, status, actor, rows_parsed, rows_loaded, rows_matched, counts, started_at, finished_at)
		SELECT 'stripe', '2024-03-01', 'succeeded', 'daemon', 1, 1, 1, '{}', ?::timestamptz + i * interval '2 minutes', now()
		FROM generate_series(1, ?) AS i`
	if err := b.db.Exec(runs, t0, 250).Error; err != nil {
		t.Fatal(err)
	}
	if err := b.cb.Exec(runs, t0.Add(time.Minute), 250).Error; err != nil {
		t.Fatal(err)
	}

	for _, l := range []struct {
		path, field, query string
	}{
		{"/api/v1/retention/purges", "purges", `SELECT id, started_at FROM purge_log`},
		{"/api/v1/reconcile/runs", "runs", `SELECT id, started_at FROM recon_runs`},
	} {
		want := b.startedNewestFirst(l.query)
		got, sizes := b.walkPages(c, tok, l.path, "before", "", 500, "", func(r resp) ([]int64, string) { return idsNext(t, l.field, r) })
		if len(sizes) == 0 || sizes[0] != 500 {
			t.Errorf("%s?limit=500 across cells: pages of %v, want a first page of 500 (as one database shows)", l.path, sizes)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: walked %d rows (pages %v), want all %d in order", l.path, len(got), sizes, len(want))
		}
	}

	// Findings: 1003 in cell a, none in cell b; the CLI's findings list --limit 1000 walks them.
	run := b.runIn(b.db)
	if err := b.db.Exec(`INSERT INTO discrepancies (run_id, first_run_id, channel, bill_date, kind, subject, detail)
		SELECT ?, ?, 'stripe', '2024-03-01', 'CHANNEL_ONLY', 'line-' || i, '{}'::jsonb FROM generate_series(1, 1003) AS i`, run, run).Error; err != nil {
		t.Fatal(err)
	}
	b.runIn(b.cb)
	want := b.allFindings(true)
	var seen []int64
	var sizes []int
	before := ""
	for range 10 {
		rows, next, err := b.srv.FindingsPageFor(context.Background(), root, reconcile.FindingFilter{Limit: reconcile.MaxFindingsListed}, before)
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, len(rows))
		for _, f := range rows {
			seen = append(seen, f.ID)
		}
		if before = next; next == "" {
			break
		}
	}
	if len(sizes) == 0 || sizes[0] != reconcile.MaxFindingsListed || !slices.Equal(seen, want) {
		t.Errorf("findings list --limit %d across cells: pages of %v, %d findings, want a first page of %d and all %d in order",
			reconcile.MaxFindingsListed, sizes, len(seen), reconcile.MaxFindingsListed, len(want))
	}
}
