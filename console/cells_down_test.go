package console

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/claim"
)

// seedDaemonIn gives db (one cell's) a schedule and a failed run of it, as that cell's daemon
// would have made them; it returns the run's id.
func (b *cellsBundle) seedDaemonIn(db *gorm.DB, schedule string) int64 {
	b.t.Helper()
	if err := db.Exec(`INSERT INTO schedules (name, job, spec, next_run_at) VALUES (?, 'sweep', '@every 1m', now() + interval '1 hour')`,
		schedule).Error; err != nil {
		b.t.Fatal(err)
	}
	var id int64
	if err := db.Raw(`INSERT INTO job_runs (schedule, job, trigger, replica, status, deadline_at, finished_at, error)
		VALUES (?, 'sweep', 'run_now', 'replica-x', 'failed', now(), now(), 'boom') RETURNING id`, schedule).Scan(&id).Error; err != nil {
		b.t.Fatal(err)
	}
	return id
}

// seedConsumedIn records a message consumer for tenant in db (one cell's), keyed "order-TENANT".
func (b *cellsBundle) seedConsumedIn(db *gorm.DB, tenant string) {
	b.t.Helper()
	st, err := claim.NewStore(db, claim.Config{DigestSecret: testSecret})
	if err != nil {
		b.t.Fatal(err)
	}
	k := b.seedIn(st, tenant, "order-"+tenant, true)
	if err := db.Exec(`INSERT INTO consumed_messages (consumer, business_key, message_id, tenant) VALUES ('shipping', ?, ?, ?)`,
		"order-"+tenant, fmt.Sprint(k.ID), tenant).Error; err != nil {
		b.t.Fatal(err)
	}
}

// closeCellB takes cell b's database away from the console (its pool closed): a cell failing
// over, as the console sees it.
func (b *cellsBundle) closeCellB() {
	b.t.Helper()
	sqlDB, err := b.cells.Cells()[1].DB.DB()
	if err != nil {
		b.t.Fatal(err)
	}
	sqlDB.Close()
}

// TestCells_JobsRetentionAndConsumersPagesPastADownCell: with cell b's database gone, the jobs
// page, the retention dry run and the consumers page answer with what cell a holds and name cell
// b, as the keys and findings pages do; /api/v1/jobs (the daemons' status, like the dashboard's)
// names it in cells_unavailable; the dry run's API, a count a program acts on, answers whole or
// not at all.
func TestCells_JobsRetentionAndConsumersPagesPastADownCell(t *testing.T) {
	b := setupCells(t)
	b.addOperator("root", access.RoleAdmin, "*")
	root, tok := b.signIn("root"), b.token("root")
	runA := b.seedDaemonIn(b.db, "sweep-a")
	b.seedDaemonIn(b.cb, "sweep-b")
	b.seedConsumedIn(b.db, "acme")
	b.seedConsumedIn(b.cb, "globex")
	b.closeCellB()

	for _, c := range []struct {
		path    string
		want    string
		banners []string // each names cell b
	}{
		{"/jobs", fmt.Sprintf(`href="/jobs/runs/%d"`, runA), []string{`id="cells-left-out"`, `id="job-runs-left-out"`}},
		// The runs table the page polls says so itself: it replaces the table every second.
		{"/jobs/runs", fmt.Sprintf(`href="/jobs/runs/%d"`, runA), []string{`id="job-runs-left-out"`}},
		{"/retention/preview", `id="preview"`, []string{`id="cells-left-out"`}},
		{"/consumers?key=order-acme", "order-acme", []string{`id="cells-left-out"`}},
	} {
		got := root.get(c.path)
		if got.Status != 200 {
			t.Errorf("%s with cell b down: %d %s, want cell a's part", c.path, got.Status, truncate(got.Body, 300))
			continue
		}
		mustContain(t, c.path+" with cell b down", got.Body, c.want)
		for _, leftOut := range c.banners {
			mustContain(t, c.path+" with cell b down", got.Body, leftOut)
			if i := strings.Index(got.Body, leftOut); i >= 0 && !strings.Contains(got.Body[i:min(len(got.Body), i+300)], "cell b") {
				t.Errorf("%s: the warning %s does not name cell b: %s", c.path, leftOut, got.Body[i:min(len(got.Body), i+300)])
			}
		}
	}
	// The jobs page's daemons table keeps a row for cell b, saying it did not answer.
	mustContain(t, "cell b's daemon row while it is down", rowOf(root.get("/jobs").Body, `id="cell-daemon-b"`), "did not answer")
	got := root.api("/api/v1/jobs", tok)
	j := decode[struct {
		Runs []struct {
			ID   int64  `json:"id"`
			Cell string `json:"cell"`
		} `json:"runs"`
		Cells []struct {
			Name string `json:"name"`
		} `json:"cells"`
		Unavailable []string `json:"cells_unavailable"`
	}](t, got)
	if got.Status != 200 || !slices.Equal(j.Unavailable, []string{"b"}) || len(j.Cells) != 1 || j.Cells[0].Name != "a" ||
		len(j.Runs) != 1 || j.Runs[0].ID != runA {
		t.Errorf("/api/v1/jobs with cell b down: %d %+v, want cell a's daemon and run, cell b named", got.Status, j)
	}
	if got := root.api("/api/v1/retention/preview", tok); got.Status == 200 {
		t.Errorf("the dry run's API with cell b down: 200, want an error (a count a program acts on answers whole or not at all)")
	}
}

// TestCells_ScheduleActionsGoToTheSchedulesCell: every cell's daemon has its own schedules, often
// of the same names, so the jobs page lists each cell's schedules marked with their cell, and
// run now, pause and resume (page and API) change the schedule in the cell the form or the body
// names — the control cell's when it names none, as before cells — with the route's CSRF, the
// one scope check of schedules, and the audit row in the control database's chain naming the
// cell.
func TestCells_ScheduleActionsGoToTheSchedulesCell(t *testing.T) {
	b := setupCells(t)
	b.addOperator("root", access.RoleAdmin, "*")
	b.addOperator("otto", access.RoleOperator, "acme")
	root, tok := b.signIn("root"), b.token("root")
	b.seedDaemonIn(b.db, "sweep")
	b.seedDaemonIn(b.cb, "sweep")
	schedule := func(db *gorm.DB) (paused, requested bool) {
		t.Helper()
		var row struct {
			Paused    bool
			Requested bool
		}
		if err := db.Raw(`SELECT paused, run_requested_at IS NOT NULL AS requested FROM schedules WHERE name = 'sweep'`).Scan(&row).Error; err != nil {
			t.Fatal(err)
		}
		return row.Paused, row.Requested
	}

	page := root.get("/jobs").Body
	mustContain(t, "jobs page", page, `id="schedule-sweep@a"`, `id="schedule-sweep@b"`, `id="run-sweep@b"`, `name="cell" value="b"`)

	if got := root.post("/jobs/pause", url.Values{"name": {"sweep"}, "cell": {"b"}}, false); got.Status != 403 {
		t.Errorf("pause without the CSRF token: %d, want 403", got.Status)
	}
	if got := b.signIn("otto").post("/jobs/run", url.Values{"name": {"sweep"}, "cell": {"b"}}, true); got.Status != 403 {
		t.Errorf("run now of cell b's every-tenant schedule by an operator of acme: %d, want 403", got.Status)
	}
	if got := root.post("/jobs/pause", url.Values{"name": {"sweep"}, "cell": {"b"}}, true); got.Status != 303 {
		t.Fatalf("pause cell b's sweep: %d %s", got.Status, truncate(got.Body, 300))
	}
	if got := root.post("/jobs/run", url.Values{"name": {"sweep"}, "cell": {"b"}}, true); got.Status != 303 {
		t.Fatalf("run now cell b's sweep: %d %s", got.Status, truncate(got.Body, 300))
	}
	if pa, ra := schedule(b.db); pa || ra {
		t.Errorf("cell a's sweep: paused %v, run requested %v; want neither (the actions named cell b)", pa, ra)
	}
	if pb, rb := schedule(b.cb); !pb || !rb {
		t.Errorf("cell b's sweep: paused %v, run requested %v; want both", pb, rb)
	}
	mustContain(t, "jobs page after the pause", root.get("/jobs").Body, `id="resume-sweep@b"`, `id="pause-sweep@a"`)
	if got := root.apiPost("/api/v1/jobs/resume", tok, map[string]string{"name": "sweep", "cell": "b"}); got.Status != 202 {
		t.Errorf("API resume of cell b's sweep: %d %s", got.Status, truncate(got.Body, 300))
	}
	if pb, _ := schedule(b.cb); pb {
		t.Error("cell b's sweep is still paused after the API's resume")
	}
	// No cell named: the control cell's, as before cells.
	if got := root.apiPost("/api/v1/jobs/pause", tok, map[string]string{"name": "sweep"}); got.Status != 202 {
		t.Errorf("API pause naming no cell: %d %s", got.Status, truncate(got.Body, 300))
	}
	if pa, _ := schedule(b.db); !pa {
		t.Error("the pause naming no cell did not pause the control cell's sweep")
	}
	if got := root.apiPost("/api/v1/jobs/run", tok, map[string]string{"name": "sweep", "cell": "zz"}); got.Status != 404 {
		t.Errorf("run now in a cell that does not exist: %d, want 404", got.Status)
	}

	if n := b.count(`SELECT count(*) FROM audit_log WHERE target = 'schedule:sweep' AND detail::jsonb->>'cell' = 'b'
		AND action IN ('job.pause', 'job.run', 'job.resume')`); n != 3 {
		t.Errorf("%d audit rows of cell b's schedule naming it, want 3 (pause, run, resume)", n)
	}
	var inB int64
	b.cb.Raw(`SELECT count(*) FROM audit_log`).Scan(&inB)
	if inB != 0 {
		t.Errorf("%d audit rows in cell b, want none (the chain is the control database's)", inB)
	}

	type jobs struct {
		Schedules []struct {
			Name string `json:"Name"`
			Cell string `json:"cell"`
		} `json:"schedules"`
	}
	j := decode[jobs](t, root.api("/api/v1/jobs", tok))
	var got []string
	for _, s := range j.Schedules {
		got = append(got, s.Name+"@"+s.Cell)
	}
	if !slices.Contains(got, "sweep@a") || !slices.Contains(got, "sweep@b") {
		t.Errorf("/api/v1/jobs schedules %v, want each cell's sweep naming its cell", got)
	}
}
