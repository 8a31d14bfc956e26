package console

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/access"
)

// statementCounter counts the statements gorm sends through db, and among them those that read
// the keys table (the dashboard's figures), by their SQL text.
type statementCounter struct {
	mu         sync.Mutex
	all, keyed int
}

func countStatements(t *testing.T, db *gorm.DB) *statementCounter {
	t.Helper()
	c := &statementCounter{}
	count := func(tx *gorm.DB) {
		sql := tx.Statement.SQL.String()
		c.mu.Lock()
		defer c.mu.Unlock()
		c.all++
		if strings.Contains(sql, "idempotency_keys") {
			c.keyed++
		}
	}
	cb := db.Callback()
	for _, err := range []error{
		cb.Query().After("gorm:query").Register("test:count_query", count),
		cb.Row().After("gorm:row").Register("test:count_row", count),
		cb.Raw().After("gorm:raw").Register("test:count_raw", count),
		cb.Create().After("gorm:create").Register("test:count_create", count),
		cb.Update().After("gorm:update").Register("test:count_update", count),
		cb.Delete().After("gorm:delete").Register("test:count_delete", count),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func (c *statementCounter) take() (all, keyed int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	all, keyed, c.all, c.keyed = c.all, c.keyed, 0, 0
	return all, keyed
}

// poll is what htmx sends for a live region: a GET of the page's address marked HX-Request.
func (c *client) poll(path string) resp {
	c.b.t.Helper()
	req, _ := http.NewRequest("GET", c.b.ts.URL+path, nil)
	req.Header.Set("HX-Request", "true")
	return c.do(req)
}

// TestLive_DashboardRefreshesItsFiguresAlone: the dashboard's figures, chart and daemon cards
// are one live region that polls the dashboard's address (paused while the tab is hidden, by
// static/live.js); a poll is answered with that region alone, and a page loaded whole always
// shows the figures of the moment.
func TestLive_DashboardRefreshesItsFiguresAlone(t *testing.T) {
	b := setup(t)
	b.addOperator("a", access.RoleAdmin, "*")
	b.seedKey("acme", "payment.charge", "live-1", `{"amount":100,"currency":"USD"}`, false)
	c := b.signIn("a")

	page := c.get("/")
	mustContain(t, "dashboard", page.Body, `<div id="dashboard-live" hx-get="/" hx-trigger="every 5s, live-visible from:body" hx-swap="outerHTML" data-live>`,
		`<script src="/static/live.js" defer></script>`)
	if js := c.get("/static/live.js"); js.Status != 200 || !strings.Contains(js.Body, "htmx:beforeRequest") || !strings.Contains(js.Body, "document.hidden") {
		t.Errorf("live.js: %d, want the script that pauses polls in a hidden tab", js.Status)
	}
	part := c.poll("/")
	if part.Status != 200 || !strings.HasPrefix(part.Body, `<div id="dashboard-live"`) || strings.Contains(part.Body, "<html") {
		t.Fatalf("poll: %d, want the live region alone:\n%s", part.Status, truncate(part.Body, 300))
	}
	figures := dashboardFigures
	if got := figures(part.Body)["processing"]; got != 1 {
		t.Errorf("poll shows %d processing, want 1", got)
	}
	// A new key: the page loaded whole counts it at once, though a poll a moment ago stored
	// the view for the others polling.
	b.seedKey("acme", "payment.charge", "live-2", `{"amount":100,"currency":"USD"}`, false)
	if got := figures(c.get("/").Body)["processing"]; got != 2 {
		t.Errorf("page loaded whole shows %d processing, want 2", got)
	}
}

// TestLive_FiftyOpenDashboardsShareOneQueryPerWindow: fifty operators keep the dashboard open
// against a pool of five connections; their polls all succeed, and the keys table is read for
// one dashboard per window however many pages poll (s.live), so the database's cost does not
// grow with open pages. It logs the cost of one refresh (statements and time).
func TestLive_FiftyOpenDashboardsShareOneQueryPerWindow(t *testing.T) {
	b := setup(t)
	// The console's own handle (row-level security): its pool and its statements.
	sqlDB, err := b.srv.db.DB()
	if err != nil {
		t.Fatal(err)
	}
	sqlDB.SetMaxOpenConns(5)
	for i := range 3 {
		b.seedKey("acme", "payment.charge", fmt.Sprintf("pool-%d", i), `{"amount":100,"currency":"USD"}`, i > 0)
	}
	const pages, polls = 50, 3
	clients := make([]*client, pages)
	for i := range clients {
		name := fmt.Sprintf("op%02d", i)
		b.addOperator(name, access.RoleViewer, "*")
		clients[i] = b.signIn(name)
	}
	counter := countStatements(t, b.srv.db)

	// The cost of one refresh when nothing is shared.
	b.srv.live = newLiveShare(0)
	clients[0].poll("/")
	counter.take()
	start := time.Now()
	if r := clients[0].poll("/"); r.Status != 200 {
		t.Fatalf("poll: %d", r.Status)
	}
	took := time.Since(start)
	oneAll, oneKeyed := counter.take()
	t.Logf("one dashboard refresh: %d statements (%d read the keys table; the rest the session and the daemon's tables), %v",
		oneAll, oneKeyed, took.Round(time.Millisecond))
	if oneKeyed == 0 {
		t.Fatal("the counter saw no statement on the keys table: it counts nothing")
	}

	// Fifty pages polling together within one window share one computation.
	b.srv.live = newLiveShare(time.Hour)
	var wg sync.WaitGroup
	errs := make(chan string, pages*polls)
	start = time.Now()
	for _, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range polls {
				req, _ := http.NewRequest("GET", b.ts.URL+"/", nil)
				req.Header.Set("HX-Request", "true")
				r, err := c.http.Do(req)
				if err != nil {
					errs <- err.Error()
					return
				}
				r.Body.Close()
				if r.StatusCode != 200 {
					errs <- fmt.Sprintf("status %d", r.StatusCode)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Errorf("a poll failed: %s", e)
	}
	all, keyed := counter.take()
	t.Logf("%d pages × %d polls through a pool of 5: %d statements in all (%.1f a poll), %d on the keys table, %v",
		pages, polls, all, float64(all)/(pages*polls), keyed, time.Since(start).Round(time.Millisecond))
	if keyed != oneKeyed {
		t.Errorf("%d statements on the keys table for %d polls, want %d: one dashboard's, shared", keyed, pages*polls, oneKeyed)
	}
	if st := sqlDB.Stats(); st.MaxOpenConnections != 5 || st.OpenConnections > 5 {
		t.Errorf("pool: %+v, want at most 5 connections", st)
	}
}

// TestLive_KeyStateRefreshesWhileTheKeyIsOpen: the key page's state polls while the key is not
// settled, a poll is answered with the state alone from the key's row, and a settled key's
// page does not poll.
func TestLive_KeyStateRefreshesWhileTheKeyIsOpen(t *testing.T) {
	b := setup(t)
	b.addOperator("a", access.RoleViewer, "*")
	open := b.seedKey("acme", "payment.charge", "live-open", `{"amount":100,"currency":"USD"}`, false)
	done := b.seedKey("acme", "payment.charge", "live-done", `{"amount":100,"currency":"USD"}`, true)
	c := b.signIn("a")
	path := fmt.Sprintf("/keys/%d", open.ID)
	mustContain(t, "open key", c.get(path).Body,
		fmt.Sprintf(`<dl id="key-state" hx-get="/keys/%d?part=state" hx-trigger="every 5s, live-visible from:body" hx-swap="outerHTML" data-live>`, open.ID))
	if body := c.get(fmt.Sprintf("/keys/%d", done.ID)).Body; !strings.Contains(body, `<dl id="key-state">`) || strings.Contains(body, "?part=state") {
		t.Error("a settled key's page polls its state")
	}
	counter := countStatements(t, b.srv.db) // the console's own handle
	start := time.Now()
	part := c.poll(path + "?part=state")
	took := time.Since(start)
	all, _ := counter.take()
	if part.Status != 200 || !strings.HasPrefix(part.Body, `<dl id="key-state"`) || strings.Contains(part.Body, "<html") || !strings.Contains(part.Body, "processing") {
		t.Fatalf("poll: %d, want the state alone:\n%s", part.Status, truncate(part.Body, 300))
	}
	t.Logf("one key state refresh: %d statements (the session and the key's row), %v", all, took.Round(time.Millisecond))
	// Another tenant's operator polls like a guess: the same 404 as a missing key.
	b.addOperator("g", access.RoleViewer, "globex")
	if got := b.signIn("g").poll(path + "?part=state"); got.Status != 404 {
		t.Errorf("another tenant's poll: %d, want 404", got.Status)
	}
}

// TestForbidden_SaysWhichRoleTheActionNeeds: a 403 names the role the action needs, on the page
// (in the reader's language) and in the API, and is still a refusal of the role.
func TestForbidden_SaysWhichRoleTheActionNeeds(t *testing.T) {
	b := setup(t)
	b.addOperator("v", access.RoleViewer, "*")
	k := b.seedKey("acme", "payment.charge", "forbid-1", `{"amount":100,"currency":"USD"}`, false)
	c := b.signIn("v")
	page := c.get("/admin/operators")
	if page.Status != 403 {
		t.Fatalf("viewer on the operators page: %d, want 403", page.Status)
	}
	mustContain(t, "403 page", page.Body, "this needs the admin role")
	preview := c.get(fmt.Sprintf("/keys/%d/replay", k.ID))
	if preview.Status != 403 {
		t.Fatalf("viewer on a replay preview: %d, want 403", preview.Status)
	}
	mustContain(t, "403 page", preview.Body, "this needs the operator or admin role")
	zh := c.getLang("/admin/operators", "zh-CN")
	mustContain(t, "zh-CN 403 page", zh.Body, "需要管理员角色")
	if !errors.Is(forbiddenBelow(access.RoleAdmin), ErrForbidden) {
		t.Error("the role's refusal is not ErrForbidden")
	}
}
