package console

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/access"
)

// purgeAt stores a finished purge run in db (one cell's) started at at, as that cell's daemon
// leaves one, and returns its id.
func (b *cellsBundle) purgeAt(db *gorm.DB, at time.Time) int64 {
	b.t.Helper()
	var id int64
	if err := db.Raw(`INSERT INTO purge_log (started_at, finished_at, dry_run, actor, status, deleted, batch_size)
		VALUES (?, ?, false, 'daemon', 'ok', 7, 1000) RETURNING id`, at, at.Add(time.Second)).Scan(&id).Error; err != nil {
		b.t.Fatal(err)
	}
	return id
}

// TestCells_PurgeHistoryOfEveryCell: each cell's daemon purges its own keys and logs it in its
// own purge_log, so the retention page's purge history and /api/v1/retention/purges list every
// cell's runs, merged by (started_at, id) newest first with each cell's position in the cursor
// (exact at every page size), each run naming its cell. With cell b down the page lists cell
// a's and names cell b; the API answers whole or not at all.
func TestCells_PurgeHistoryOfEveryCell(t *testing.T) {
	b := setupCells(t)
	b.addOperator("root", access.RoleAdmin, "*")
	root, tok := b.signIn("root"), b.token("root")
	t0 := time.Now().Add(-48 * time.Hour).Truncate(time.Second)
	for i := range 13 { // interleaved, with ties across the cells every third run
		b.purgeAt(b.db, t0.Add(time.Duration(2*i)*time.Hour))
		b.purgeAt(b.cb, t0.Add(time.Duration(2*i+i%3)*time.Hour))
	}
	want := b.startedNewestFirst(`SELECT id, started_at FROM purge_log`)

	type apiPurges struct {
		Purges []struct {
			ID   int64  `json:"ID"`
			Cell string `json:"cell"`
		} `json:"purges"`
		Next json.RawMessage `json:"next_before"`
	}
	for _, limit := range []int{1, 2, 5, 50} {
		got, sizes := b.walkPages(root, tok, "/api/v1/retention/purges", "before", "", limit, "", func(r resp) ([]int64, string) {
			p := decode[apiPurges](t, r)
			var ids []int64
			for _, run := range p.Purges {
				ids = append(ids, run.ID)
				if wantCell := map[bool]string{true: "b", false: "a"}[run.ID >= 1<<40]; run.Cell != wantCell {
					t.Errorf("purge %d names cell %q, want %q", run.ID, run.Cell, wantCell)
				}
			}
			var next string
			if len(p.Next) > 0 && string(p.Next) != "null" {
				if err := json.Unmarshal(p.Next, &next); err != nil {
					t.Fatalf("next_before %s: want a cursor of cells (a string)", p.Next)
				}
			}
			return ids, next
		})
		if !slices.Equal(got, want) {
			t.Errorf("limit %d: walked %v (pages %v)\nwant %v", limit, got, sizes, want)
		}
	}

	// The page: the same order over its pages of 20, each run naming its cell.
	row := regexp.MustCompile(`<td class="num">(\d+) <span class="badge cell">([a-z]+)</span></td>`)
	next := regexp.MustCompile(`href="(/retention\?before=[^"]+)" id="purges-next"`)
	var seen []int64
	for path, page := "/retention", 0; path != ""; page++ {
		got := root.get(path)
		if got.Status != 200 || page > 3 {
			t.Fatalf("%s: %d (page %d) %s", path, got.Status, page, truncate(got.Body, 300))
		}
		for _, m := range row.FindAllStringSubmatch(got.Body, -1) {
			id, _ := strconv.ParseInt(m[1], 10, 64)
			if wantCell := map[bool]string{true: "b", false: "a"}[id >= 1<<40]; m[2] != wantCell {
				t.Errorf("retention page: purge %d names cell %s, want %s", id, m[2], wantCell)
			}
			seen = append(seen, id)
		}
		path = ""
		if m := next.FindStringSubmatch(got.Body); m != nil {
			path = m[1]
		}
	}
	if !slices.Equal(seen, want) {
		t.Errorf("retention pages listed %v\nwant %v", seen, want)
	}

	b.closeCellB()
	got := root.get("/retention")
	if got.Status != 200 {
		t.Fatalf("retention page with cell b down: %d %s", got.Status, truncate(got.Body, 300))
	}
	mustContain(t, "retention page with cell b down", got.Body, `id="cells-left-out"`, fmt.Sprintf(`<td class="num">%d <span class="badge cell">a</span>`, want[len(want)-1]))
	if got := root.api("/api/v1/retention/purges", tok); got.Status == 200 {
		t.Errorf("the purges API with cell b down: 200, want an error (an API answers whole or not at all)")
	}
}
