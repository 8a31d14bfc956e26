package console

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/access"
)

// reconRunAt stores a finished run of channel stripe in db (one cell's) started at at, as a
// cell's reconciler leaves one: the part of the control cell's run control when that is not 0
// (with its job's name), else a run of its own. It returns the run's id.
func (b *cellsBundle) reconRunAt(db *gorm.DB, at time.Time, control int64) int64 {
	b.t.Helper()
	var ctl, job any
	if control != 0 {
		ctl, job = control, "nightly"
	}
	var id int64
	if err := db.Raw(`INSERT INTO recon_runs (channel, bill_date, status, actor, rows_parsed, rows_loaded, rows_matched, counts,
		started_at, finished_at, control_run_id, job_name)
		VALUES ('stripe', '2024-03-01', 'succeeded', 'daemon', 3, 3, 2, '{"AMOUNT_MISMATCH": 1}', ?, ?, ?, ?) RETURNING id`,
		at, at.Add(time.Second), ctl, job).Scan(&id).Error; err != nil {
		b.t.Fatal(err)
	}
	return id
}

// startedNewestFirst are the ids of the rows query (SELECT id, started_at …) finds in both
// cells, newest first by (started_at, id): the one order of the runs and purge lists merged
// across cells.
func (b *cellsBundle) startedNewestFirst(query string) []int64 {
	b.t.Helper()
	type row struct {
		ID        int64
		StartedAt time.Time
	}
	var all []row
	for _, db := range []*gorm.DB{b.db, b.cb} {
		var rows []row
		if err := db.Raw(query).Scan(&rows).Error; err != nil {
			b.t.Fatal(err)
		}
		all = append(all, rows...)
	}
	slices.SortFunc(all, func(x, y row) int { return cmp.Or(y.StartedAt.Compare(x.StartedAt), cmp.Compare(y.ID, x.ID)) })
	ids := make([]int64, len(all))
	for i, r := range all {
		ids[i] = r.ID
	}
	return ids
}

type apiRunsPage struct {
	Runs []struct {
		ID    int64  `json:"id"`
		Cell  string `json:"cell"`
		Parts []struct {
			ID           int64  `json:"id"`
			Cell         string `json:"cell"`
			ControlRunID int64  `json:"control_run_id"`
		} `json:"parts"`
	} `json:"runs"`
	Next json.RawMessage `json:"next_before"`
}

// TestCells_ReconRunsListEveryCellsRuns: the recon runs list (page and API) lists every cell's
// runs — a cell's own run too — in the one order (started_at, id) newest first, exact at every
// page size with each cell's position in the cursor; a cell's part of a control cell's run is
// not listed beside it but under it (the control run carries the summed counts; its parts say
// which cell did what and lead to the findings, which live in the cells). With cell b down the
// page lists cell a's runs and names cell b; the API answers whole or not at all.
func TestCells_ReconRunsListEveryCellsRuns(t *testing.T) {
	b := setupCells(t)
	b.addOperator("root", access.RoleAdmin, "*")
	root, tok := b.signIn("root"), b.token("root")
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	// Each cell's runs in the order it started them; a tie across the cells at minute 5.
	b.reconRunAt(b.db, at(1), 0)
	b.reconRunAt(b.cb, at(2), 0) // cell b's own run
	b.reconRunAt(b.db, at(3), 0)
	control := b.reconRunAt(b.db, at(5), 0) // a job's run: its statement matched in both cells
	b.reconRunAt(b.cb, at(5), 0)
	b.reconRunAt(b.db, at(6), 0)
	partA := b.reconRunAt(b.db, at(5).Add(time.Second), control)
	partB := b.reconRunAt(b.cb, at(5).Add(time.Second), control)
	b.reconRunAt(b.cb, at(7), 0)
	// Enough more for the page's second page, interleaved across the cells.
	for i := range 20 {
		b.reconRunAt(b.db, at(10+2*i), 0)
		b.reconRunAt(b.cb, at(11+2*i), 0)
	}
	want := b.startedNewestFirst(`SELECT id, started_at FROM recon_runs WHERE control_run_id IS NULL`) // the runs that are no other run's part
	if len(want) != 47 {
		t.Fatalf("%d runs of their own, want 47", len(want))
	}

	for _, limit := range []int{1, 2, 3, 50} {
		var parts map[int64][]string
		got, sizes := b.walkPages(root, tok, "/api/v1/reconcile/runs", "before", "", limit, "", func(r resp) ([]int64, string) {
			p := decode[apiRunsPage](t, r)
			var ids []int64
			for _, run := range p.Runs {
				ids = append(ids, run.ID)
				if wantCell := map[bool]string{true: "b", false: "a"}[run.ID >= 1<<40]; run.Cell != wantCell {
					t.Errorf("run %d names cell %q, want %q", run.ID, run.Cell, wantCell)
				}
				for _, part := range run.Parts {
					if parts == nil {
						parts = map[int64][]string{}
					}
					parts[run.ID] = append(parts[run.ID], fmt.Sprintf("%d@%s", part.ID, part.Cell))
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
		wantParts := []string{fmt.Sprintf("%d@a", partA), fmt.Sprintf("%d@b", partB)}
		if len(parts) != 1 || !slices.Equal(parts[control], wantParts) {
			t.Errorf("limit %d: parts %v, want run %d's %v only", limit, parts, control, wantParts)
		}
	}

	// The page: the same order over two pages, the parts under their run, cell b's marked.
	link := regexp.MustCompile(`href="/reconcile/runs/(\d+)"`)
	next := regexp.MustCompile(`href="(/reconcile/runs\?before=[^"]+)" id="runs-next"`)
	var seen []int64
	path := "/reconcile/runs"
	for page := 0; path != ""; page++ {
		got := root.get(strings.ReplaceAll(path, "&amp;", "&"))
		if got.Status != 200 || page > 3 {
			t.Fatalf("%s: %d (page %d)", path, got.Status, page)
		}
		for _, m := range link.FindAllStringSubmatch(got.Body, -1) {
			id, _ := strconv.ParseInt(m[1], 10, 64)
			seen = append(seen, id)
		}
		path = ""
		if m := next.FindStringSubmatch(got.Body); m != nil {
			path = m[1]
		}
		if page == 0 {
			mustContain(t, "runs page", got.Body, `<span class="badge cell">b</span>`)
		}
	}
	i := slices.Index(seen, control)
	if i < 0 || i+2 >= len(seen) || seen[i+1] != partA || seen[i+2] != partB {
		t.Errorf("runs page: %v, want run %d followed by its parts %d and %d", seen, control, partA, partB)
	}
	if i >= 0 && i+2 < len(seen) {
		seen = slices.Delete(seen, i+1, i+3)
	}
	if !slices.Equal(seen, want) {
		t.Errorf("runs pages listed %v\nwant %v", seen, want)
	}

	// The control run's page lists its parts: the way to each cell's findings of its statement.
	mustContain(t, "the control run's page", root.get(fmt.Sprintf("/reconcile/runs/%d", control)).Body, `id="run-parts"`,
		fmt.Sprintf(`href="/reconcile/runs/%d"`, partA), fmt.Sprintf(`href="/reconcile/findings?run=%d&amp;kind=AMOUNT_MISMATCH"`, partB))

	b.closeCellB()
	got := root.get("/reconcile/runs")
	if got.Status != 200 {
		t.Fatalf("runs page with cell b down: %d %s", got.Status, truncate(got.Body, 300))
	}
	mustContain(t, "runs page with cell b down", got.Body, `id="cells-left-out"`, fmt.Sprintf(`href="/reconcile/runs/%d"`, control))
	if got := root.api("/api/v1/reconcile/runs", tok); got.Status == 200 {
		t.Errorf("the runs API with cell b down: 200, want an error (an API answers whole or not at all)")
	}
}

// TestCells_AReconJobPageNestsItsRunsParts: a recon job's page lists its recent runs as the runs
// list does — a run with its cells' parts under it, each naming its cell, the way to each cell's
// findings — and, with a cell down, the runs of the cells that answer, naming the one left out.
func TestCells_AReconJobPageNestsItsRunsParts(t *testing.T) {
	b := setupCells(t)
	b.addOperator("root", access.RoleAdmin, "*")
	root := b.signIn("root")
	b.setChannel("stripe", "acme", "globex")
	job := url.Values{"name": {"nightly"}, "channel": {"stripe"}, "format": {"stripe"}, "source": {"/data/{date}.csv"},
		"cron_spec": {"30 5 * * *"}, "time_zone": {"UTC"}, "enabled": {"1"}, "operations": {"payment.charge"}}
	if got := root.post("/reconcile/jobs", job, true); got.Status != 303 {
		t.Fatalf("create the job: %d %s", got.Status, truncate(got.Body, 300))
	}
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second)
	older := b.reconRunAt(b.db, t0, 0)
	control := b.reconRunAt(b.db, t0.Add(time.Minute), 0)
	b.exec(`UPDATE recon_runs SET job_id = (SELECT id FROM recon_jobs WHERE name = 'nightly') WHERE id IN (?, ?)`, older, control)
	partA := b.reconRunAt(b.db, t0.Add(time.Minute+time.Second), control)
	partB := b.reconRunAt(b.cb, t0.Add(time.Minute+time.Second), control)

	link := regexp.MustCompile(`href="/reconcile/runs/(\d+)"`)
	listed := func(body string) []int64 {
		var ids []int64
		for _, m := range link.FindAllStringSubmatch(body, -1) {
			id, _ := strconv.ParseInt(m[1], 10, 64)
			ids = append(ids, id)
		}
		return ids
	}
	got := root.get("/reconcile/jobs/nightly")
	if ids := listed(got.Body); got.Status != 200 || !slices.Equal(ids, []int64{control, partA, partB, older}) {
		t.Errorf("the job's page: %d, runs %v, want run %d, its parts %d (a) and %d (b) under it, then %d", got.Status, ids,
			control, partA, partB, older)
	}
	mustContain(t, "the job's page", got.Body, `<span class="badge cell">b</span>`,
		fmt.Sprintf(`href="/reconcile/findings?run=%d&amp;kind=AMOUNT_MISMATCH"`, partB))

	b.closeCellB()
	got = root.get("/reconcile/jobs/nightly")
	if ids := listed(got.Body); got.Status != 200 || !slices.Equal(ids, []int64{control, partA, older}) {
		t.Errorf("the job's page with cell b down: %d, runs %v, want %d with cell a's part %d, then %d", got.Status, ids, control, partA, older)
	}
	mustContain(t, "the job's page with cell b down", got.Body, `id="cells-left-out"`)
	if i := strings.Index(got.Body, `id="cells-left-out"`); i >= 0 && !strings.Contains(got.Body[i:min(len(got.Body), i+300)], "cell b") {
		t.Errorf("the job's page: the warning does not name cell b: %s", got.Body[i:min(len(got.Body), i+300)])
	}
}

// TestCells_AControlRunsFindingsAreItsPartsInEveryCell: a control cell's run stands for its cells'
// parts — its counts are theirs, summed — so its findings links (the run's page's "Findings of
// this run", a kind's count on its row) lead to the findings of its parts in every cell, and no
// other run's; with one database a run's findings are its own (runs have no parts there).
func TestCells_AControlRunsFindingsAreItsPartsInEveryCell(t *testing.T) {
	b := setupCells(t)
	b.addOperator("root", access.RoleAdmin, "*")
	root, tok := b.signIn("root"), b.token("root")
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second)
	control := b.reconRunAt(b.db, t0, 0)
	partA := b.reconRunAt(b.db, t0.Add(time.Second), control)
	partB := b.reconRunAt(b.cb, t0.Add(time.Second), control)
	other := b.reconRunAt(b.cb, t0.Add(time.Minute), 0)
	b.findingIn(b.db, partA, "AMOUNT_MISMATCH", "a-1", nil)
	b.findingIn(b.cb, partB, "AMOUNT_MISMATCH", "b-1", nil)
	b.findingIn(b.db, partA, "CHANNEL_ONLY", "a-2", nil)
	otherF := b.findingIn(b.cb, other, "AMOUNT_MISMATCH", "other", nil)
	want := slices.DeleteFunc(b.newestFirst("discrepancies", func(*string) bool { return true }), func(id int64) bool { return id == otherF })

	got, _ := b.walkFindings(root, tok, fmt.Sprintf("run=%d", control), 50)
	if !slices.Equal(got, want) {
		t.Errorf("findings of control run %d: %v, want its parts' %v", control, got, want)
	}
	page := root.get(fmt.Sprintf("/reconcile/runs/%d", control))
	mustContain(t, "the control run's page", page.Body, fmt.Sprintf(`href="/reconcile/findings?run=%d"`, control))
	list := root.get(fmt.Sprintf("/reconcile/findings?run=%d", control))
	for _, id := range want {
		mustContain(t, "the control run's findings", list.Body, fmt.Sprintf("finding-%d", id))
	}
	mustNotContain(t, "the control run's findings", list.Body, fmt.Sprintf("finding-%d\"", otherF))
	// A kind's count on the control run's row: its parts' findings of that kind in both cells.
	byKind, _ := b.walkFindings(root, tok, fmt.Sprintf("run=%d&kind=AMOUNT_MISMATCH", control), 50)
	if len(byKind) != 2 {
		t.Errorf("AMOUNT_MISMATCH findings of control run %d: %v, want one in each cell", control, byKind)
	}
	// A part's own findings are its own.
	if got, _ := b.walkFindings(root, tok, fmt.Sprintf("run=%d", partB), 50); len(got) != 1 || got[0] < 1<<40 {
		t.Errorf("findings of part %d: %v, want its one finding in cell b", partB, got)
	}
}
