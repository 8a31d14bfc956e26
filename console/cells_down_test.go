package console

import (
	"fmt"
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

	leftOut := `id="cells-left-out"`
	for _, c := range []struct {
		path   string
		want   string
		banner bool // a whole page names the cell; the runs table it polls only leaves it out
	}{
		{"/jobs", fmt.Sprintf(`href="/jobs/runs/%d"`, runA), true},
		{"/jobs/runs", fmt.Sprintf(`href="/jobs/runs/%d"`, runA), false},
		{"/retention/preview", `id="preview"`, true},
		{"/consumers?key=order-acme", "order-acme", true},
	} {
		got := root.get(c.path)
		if got.Status != 200 {
			t.Errorf("%s with cell b down: %d %s, want cell a's part", c.path, got.Status, truncate(got.Body, 300))
			continue
		}
		mustContain(t, c.path+" with cell b down", got.Body, c.want)
		if !c.banner {
			continue
		}
		mustContain(t, c.path+" with cell b down", got.Body, leftOut)
		if i := strings.Index(got.Body, leftOut); i >= 0 && !strings.Contains(got.Body[i:min(len(got.Body), i+300)], "cell b") {
			t.Errorf("%s: the warning does not name cell b: %s", c.path, got.Body[i:min(len(got.Body), i+300)])
		}
	}
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
