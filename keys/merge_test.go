package keys_test

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/idemops/idemops/keys"
)

// cellPage is what SearchKeys answers in one cell holding rows (newest first): the first limit
// rows after the cursor, and the cursor of its next page.
func cellPage(rows []keys.KeySummary, after *keys.Cursor, limit int) keys.Page {
	var out []keys.KeySummary
	for _, r := range rows {
		if after != nil && !(r.CreatedAt.Before(after.CreatedAt) || r.CreatedAt.Equal(after.CreatedAt) && r.ID < after.ID) {
			continue
		}
		out = append(out, r)
	}
	if len(out) <= limit {
		return keys.Page{Rows: out}
	}
	out = out[:limit]
	last := out[len(out)-1]
	return keys.Page{Rows: out, Next: &keys.Cursor{CreatedAt: last.CreatedAt, ID: last.ID}}
}

// Walking merged pages of several cells visits every key once, in the order one database holding
// them all would list them, at every page size — with created_at ties within and across cells,
// cells of very different sizes and empty cells — and the last page alone has no next cursor.
func TestMergePages_WalkIsTheOneDatabaseOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(36, 1))
	base := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for trial := range 200 {
		ncells := 1 + r.IntN(4)
		cells := make([][]keys.KeySummary, ncells)
		var all []keys.KeySummary
		for c := range cells {
			for i := range r.IntN(30) {
				k := keys.KeySummary{ID: int64(c+1)<<40 + int64(i) + 1, CreatedAt: base.Add(-time.Duration(r.IntN(12)) * time.Second)}
				cells[c] = append(cells[c], k)
				all = append(all, k)
			}
		}
		byOrder := func(a, b keys.KeySummary) int {
			if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
				return c
			}
			switch {
			case a.ID > b.ID:
				return -1
			case a.ID < b.ID:
				return 1
			}
			return 0
		}
		for c := range cells {
			slices.SortFunc(cells[c], byOrder)
		}
		slices.SortFunc(all, byOrder)
		limit := 1 + r.IntN(8)
		var seen []int64
		var after *keys.Cursor
		for page := 0; ; page++ {
			if page > len(all)+1 {
				t.Fatalf("trial %d: the walk does not end", trial)
			}
			pages := make([]keys.Page, ncells)
			for c := range cells {
				pages[c] = cellPage(cells[c], after, limit)
			}
			rows, next := keys.MergePages(pages, limit)
			if next != nil && len(rows) != limit {
				t.Fatalf("trial %d page %d: %d rows and a next cursor, want %d", trial, page, len(rows), limit)
			}
			for _, k := range rows {
				seen = append(seen, k.ID)
			}
			if next == nil {
				break
			}
			after = next
		}
		want := make([]int64, len(all))
		for i, k := range all {
			want[i] = k.ID
		}
		if !slices.Equal(seen, want) {
			t.Fatalf("trial %d (%d cells, limit %d): walk %v\nwant %v", trial, ncells, limit, seen, want)
		}
	}
}

// Find by key merges into (tenant, operation, id) order, at most MaxFound rows.
func TestMergeFound_TenantOperationIDOrder(t *testing.T) {
	a := []keys.KeySummary{{ID: 5, Tenant: "acme", Operation: "refund"}, {ID: 2, Tenant: "initech", Operation: "charge"}}
	b := []keys.KeySummary{{ID: 1<<40 + 1, Tenant: "globex", Operation: "charge"}, {ID: 1<<40 + 9, Tenant: "acme", Operation: "charge"}}
	var got []int64
	for _, k := range keys.MergeFound([][]keys.KeySummary{a, b}) {
		got = append(got, k.ID)
	}
	if want := []int64{1<<40 + 9, 5, 1<<40 + 1, 2}; !slices.Equal(got, want) {
		t.Errorf("merged %v, want %v", got, want)
	}
	var many [][]keys.KeySummary
	for c := range 3 {
		var rows []keys.KeySummary
		for i := range keys.MaxFound {
			rows = append(rows, keys.KeySummary{ID: int64(c)<<40 + int64(i) + 1, Tenant: "t", Operation: "o"})
		}
		many = append(many, rows)
	}
	if n := len(keys.MergeFound(many)); n != keys.MaxFound {
		t.Errorf("3×MaxFound found: %d rows, want %d", n, keys.MaxFound)
	}
}

// Counts by operation and state add up across cells, in (operation, state) order.
func TestMergeStateCounts_Sums(t *testing.T) {
	got := keys.MergeStateCounts([][]keys.StateCount{
		{{Operation: "charge", State: "completed", N: 3}, {Operation: "refund", State: "processing", N: 1}},
		{{Operation: "charge", State: "completed", N: 4}, {Operation: "charge", State: "failed_final", N: 2}},
	})
	want := []keys.StateCount{{Operation: "charge", State: "completed", N: 7}, {Operation: "charge", State: "failed_final", N: 2},
		{Operation: "refund", State: "processing", N: 1}}
	if !slices.Equal(got, want) {
		t.Errorf("merged %v, want %v", got, want)
	}
}
