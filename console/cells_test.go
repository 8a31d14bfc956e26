package console

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
	"github.com/idemops/idemops/replay"
	"github.com/idemops/idemops/retention"
)

// testCells is a map of two cells whose placement a test can switch (as a tenant move does).
type testCells struct {
	cells []TenantCell
	mu    sync.Mutex
	place map[string]string
}

func (c *testCells) Cells() []TenantCell {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.cells)
}

// add adds a cell holding tenants, as a map that grew while the console ran.
func (c *testCells) add(cell TenantCell, tenants ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cells = append(c.cells, cell)
	for _, t := range tenants {
		c.place[t] = cell.Name
	}
}

func (c *testCells) Placement() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.place)
}

func (c *testCells) move(tenant, to string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.place[tenant] = to
}

// cellsBundle is a console over two cells: acme and initech in cell a, which is also the control
// database (the bundle's own, b.db), globex in cell b (cb, on a database of its own whose ids
// start at 1<<40, as package cells keeps each cell's sequences in a range of its own).
type cellsBundle struct {
	*bundle
	cb     *gorm.DB     // cell b, as the tables' owner
	claimB *claim.Store // claims in cell b, as a service of cell b makes them
	cells  *testCells
}

func setupCells(t *testing.T, mod ...func(*Config)) *cellsBundle {
	t.Helper()
	cb := pgtest.New(t)
	if err := cb.Exec(`SELECT setval(format('%I.%I', schemaname, sequencename), 1::bigint << 40) FROM pg_sequences
		WHERE max_value > 1::bigint << 40`).Error; err != nil {
		t.Fatal(err)
	}
	claimB, err := claim.NewStore(cb, claim.Config{DigestSecret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	cells := &testCells{place: map[string]string{"acme": "a", "initech": "a", "globex": "b"}}
	b := setup(t, func(cfg *Config) {
		cells.cells = []TenantCell{{Name: "a", DB: cfg.DB}, {Name: "b", DB: pgtest.Tenant(t, cb)}}
		cfg.Cells = cells
		for _, m := range mod {
			m(cfg)
		}
	})
	return &cellsBundle{bundle: b, cb: cb, claimB: claimB, cells: cells}
}

// seedIn claims (and completes) a key through st, the claim store of one cell.
func (b *cellsBundle) seedIn(st *claim.Store, tenant, key string, complete bool) *claim.Key {
	b.t.Helper()
	saved := b.claims
	b.claims = st
	defer func() { b.claims = saved }()
	return b.seedKey(tenant, "payment.charge", key, `{"amount":100,"currency":"EUR"}`, complete)
}

// allKeys are both cells' keys as (created_at, id), newest first: what one database holding
// them all would list.
func (b *cellsBundle) allKeys(tenants ...string) []int64 {
	return b.newestFirst("idempotency_keys", func(tenant *string) bool { return len(tenants) == 0 || slices.Contains(tenants, *tenant) })
}

// newestFirst are the ids of table's rows in both cells newest first by (created_at, id), those
// whose tenant column keep keeps.
func (b *cellsBundle) newestFirst(table string, keep func(tenant *string) bool) []int64 {
	b.t.Helper()
	type row struct {
		ID        int64
		CreatedAt time.Time
		Tenant    *string
	}
	var all []row
	for _, db := range []*gorm.DB{b.db, b.cb} {
		var rows []row
		if err := db.Raw(`SELECT id, created_at, tenant FROM ` + table).Scan(&rows).Error; err != nil {
			b.t.Fatal(err)
		}
		all = append(all, rows...)
	}
	slices.SortFunc(all, func(x, y row) int {
		if c := y.CreatedAt.Compare(x.CreatedAt); c != 0 {
			return c
		}
		return cmp.Compare(y.ID, x.ID)
	})
	var ids []int64
	for _, r := range all {
		if keep(r.Tenant) {
			ids = append(ids, r.ID)
		}
	}
	return ids
}

type apiKeysPage struct {
	Keys []struct {
		ID     int64  `json:"id"`
		Tenant string `json:"tenant"`
	} `json:"keys"`
	Next *string `json:"next_cursor"`
}

// walk pages through GET /api/v1/keys?query with limit keys a page from after (empty: the first
// page), and returns every key id seen in order and the pages' sizes.
func (b *cellsBundle) walk(c *client, tok, query string, limit int, after string) (ids []int64, sizes []int) {
	return b.walkPages(c, tok, "/api/v1/keys", "after", query, limit, after, func(got resp) ([]int64, string) {
		p := decode[apiKeysPage](b.t, got)
		ids := make([]int64, len(p.Keys))
		for i, k := range p.Keys {
			ids[i] = k.ID
		}
		if p.Next == nil {
			return ids, ""
		}
		return ids, *p.Next
	})
}

// walkPages pages through GET path?query with limit items a page from the cursor from (empty:
// the first page; param names it): page reads a page's ids and its next cursor ("" at the
// end). It returns every id seen in order and the pages' sizes.
func (b *cellsBundle) walkPages(c *client, tok, path, param, query string, limit int, from string,
	page func(resp) ([]int64, string)) (ids []int64, sizes []int) {
	b.t.Helper()
	for range 100 {
		q, _ := url.ParseQuery(query)
		q.Set("limit", fmt.Sprint(limit))
		if from != "" {
			q.Set(param, from)
		}
		got := c.api(path+"?"+q.Encode(), tok)
		if got.Status != 200 {
			b.t.Fatalf("%s?%s: status %d: %s", path, q.Encode(), got.Status, truncate(got.Body, 300))
		}
		some, next := page(got)
		sizes, ids = append(sizes, len(some)), append(ids, some...)
		if next == "" {
			return ids, sizes
		}
		from = next
	}
	b.t.Fatalf("%s: more than 100 pages", path)
	return nil, nil
}

// TestCells_KeysAcrossCells: with acme in cell a and globex in cell b, the console searches both
// and merges them into the one order a single database would give — first page, every page of
// a walk, a deep page opened from its cursor, with created_at ties across cells — finds by key in
// both, opens a key of either cell and acts on it in its own cell (audited in the control
// database), sums the dashboard's counts over the cells, and keeps every operator within their
// tenants. Rows a tenant move left in the old cell are not shown.
func TestCells_KeysAcrossCells(t *testing.T) {
	b := setupCells(t)
	b.addOperator("root", access.RoleAdmin, "*")
	b.addOperator("acme-op", access.RoleOperator, "acme")
	b.addOperator("globex-admin", access.RoleAdmin, "globex")
	b.addOperator("both", access.RoleViewer, "acme", "globex")

	// 9 acme keys in cell a (2 processing), 8 globex keys in cell b (3 processing), and one raw key
	// quoted in both tenants.
	for i := range 9 {
		b.seedIn(b.claims, "acme", fmt.Sprintf("a-%d", i), i >= 2)
	}
	for i := range 8 {
		b.seedIn(b.claimB, "globex", fmt.Sprintf("g-%d", i), i >= 3)
	}
	dupA := b.seedIn(b.claims, "acme", "order-77", true)
	dupB := b.seedIn(b.claimB, "globex", "order-77", true)
	if dupB.ID < 1<<40 || dupA.ID >= 1<<40 {
		t.Fatalf("cell ids: a %d, b %d: the cells' id ranges are not set", dupA.ID, dupB.ID)
	}
	// created_at interleaves the cells with ties within and across them: two keys a second in
	// each cell, the same seconds in both.
	at := `UPDATE idempotency_keys k SET created_at = timestamptz '2026-12-01 12:00:00+00' - (s.n / 2) * interval '1 second'
		FROM (SELECT id, row_number() OVER (ORDER BY id) AS n FROM idempotency_keys) s WHERE s.id = k.id`
	b.exec(at)
	if err := b.cb.Exec(at).Error; err != nil {
		t.Fatal(err)
	}

	root, rootTok := b.signIn("root"), b.token("root")
	want := b.allKeys()
	if len(want) != 19 {
		t.Fatalf("seeded %d keys, want 19", len(want))
	}

	// Search: every page size walks both cells in the one order, each key once.
	for _, limit := range []int{1, 3, 4, 50} {
		got, sizes := b.walk(root, rootTok, "", limit, "")
		if !slices.Equal(got, want) {
			t.Errorf("limit %d: walk %v\nwant        %v", limit, got, want)
		}
		for i, n := range sizes[:len(sizes)-1] {
			if n != limit {
				t.Errorf("limit %d: page %d has %d keys", limit, i, n)
			}
		}
	}
	// A deep page opened from a cursor (the 11th key's) is the rest of the order from there.
	var deep struct {
		CreatedAt time.Time
		ID        int64
	}
	cursorDB := b.db
	if want[10] >= 1<<40 {
		cursorDB = b.cb
	}
	cursorDB.Raw(`SELECT created_at, id FROM idempotency_keys WHERE id = ?`, want[10]).Scan(&deep)
	after := Cursor{CreatedAt: deep.CreatedAt, ID: deep.ID}.String()
	if got, _ := b.walk(root, rootTok, "", 4, after); !slices.Equal(got, want[11:]) {
		t.Errorf("deep pages from the 11th key: %v, want %v", got, want[11:])
	}
	// Filters reach both cells; a tenant filter asks its own cell only.
	if got, _ := b.walk(root, rootTok, "state=processing", 2, ""); len(got) != 5 {
		t.Errorf("state=processing: %d keys, want 5", len(got))
	}
	if got, _ := b.walk(root, rootTok, "tenant=globex", 3, ""); !slices.Equal(got, b.allKeys("globex")) {
		t.Errorf("tenant=globex: %v, want %v", got, b.allKeys("globex"))
	}
	// The key page lists both cells' keys.
	page := root.get("/keys?limit=50")
	mustContain(t, "keys page", page.Body, fmt.Sprintf("/keys/%d", dupA.ID), fmt.Sprintf("/keys/%d", dupB.ID))
	// A bulk replay is offered across cells (TestCells_BulkReplayAcrossCells).
	mustContain(t, "keys page", page.Body, `action="/replays/bulk"`)

	// Scope: an operator sees their tenants' keys only, whichever cells hold them.
	both := b.signIn("both")
	if got, _ := b.walk(both, b.token("both"), "", 5, ""); !slices.Equal(got, want) {
		t.Errorf("acme+globex viewer: %v, want %v", got, want)
	}
	acme, acmeTok := b.signIn("acme-op"), b.token("acme-op")
	if got, _ := b.walk(acme, acmeTok, "", 4, ""); !slices.Equal(got, b.allKeys("acme")) {
		t.Errorf("acme operator: %v, want acme's %v", got, b.allKeys("acme"))
	}
	if got, _ := b.walk(acme, acmeTok, "tenant=globex", 4, ""); len(got) != 0 {
		t.Errorf("acme operator, tenant=globex: %v, want none", got)
	}
	for _, path := range []string{fmt.Sprintf("/keys/%d", dupB.ID), fmt.Sprintf("/api/v1/keys/%d", dupB.ID)} {
		if got := acme.api(path, acmeTok); got.Status != 404 {
			t.Errorf("acme operator GET %s (globex, cell b): %d, want 404", path, got.Status)
		}
	}
	if got := acme.post(fmt.Sprintf("/keys/%d/reveal", dupB.ID), nil, true); got.Status != 404 {
		t.Errorf("acme operator reveals globex's key: %d, want 404", got.Status)
	}
	globex := b.signIn("globex-admin")
	if got := globex.get(fmt.Sprintf("/keys/%d", dupA.ID)); got.Status != 404 {
		t.Errorf("globex admin opens acme's key (cell a): %d, want 404", got.Status)
	}

	// Find by key: both cells answer, in (tenant, operation, id) order.
	var found apiKeysPage
	_ = json.Unmarshal([]byte(root.apiPost("/api/v1/keys/find", rootTok, map[string]string{"key": "order-77"}).Body), &found)
	if len(found.Keys) != 2 || found.Keys[0].ID != dupA.ID || found.Keys[1].ID != dupB.ID {
		t.Errorf("find order-77: %+v, want acme's %d then globex's %d", found.Keys, dupA.ID, dupB.ID)
	}
	if got := acme.apiPost("/api/v1/keys/find", acmeTok, map[string]string{"key": "order-77"}); !strings.Contains(got.Body, fmt.Sprint(dupA.ID)) ||
		strings.Contains(got.Body, fmt.Sprint(dupB.ID)) {
		t.Errorf("acme operator finds order-77: %s, want acme's key only", got.Body)
	}

	// Two retryably failed globex keys in cell b, for the dashboard, mark final and a replay.
	failed := b.seedFailedIn(b.claimB, "globex", "g-failed")
	retry := b.seedFailedIn(b.claimB, "globex", "g-retry")
	globexTok := b.token("globex-admin")

	// Dashboard: counts are sums over the operator's cells.
	type dash struct {
		Open map[string]int64 `json:"open_keys"`
	}
	for _, tc := range []struct {
		who, tok        string
		processing, frr int64
	}{{"root", rootTok, 5, 2}, {"acme-op", acmeTok, 2, 0}, {"globex-admin", globexTok, 3, 2}} {
		d := decode[dash](t, b.client().api("/api/v1/dashboard", tc.tok))
		if d.Open["processing"] != tc.processing || d.Open["failed_retryable"] != tc.frr {
			t.Errorf("%s dashboard: open keys %v, want processing %d, failed_retryable %d", tc.who, d.Open, tc.processing, tc.frr)
		}
	}
	if got := root.get("/"); got.Status != 200 {
		t.Errorf("dashboard page: %d", got.Status)
	}

	// The key page of a cell-b key: its history is read in cell b.
	got := globex.get(fmt.Sprintf("/keys/%d", dupB.ID))
	if got.Status != 200 {
		t.Fatalf("globex admin opens its key: %d", got.Status)
	}
	mustContain(t, "key page (cell b)", got.Body, "order-77", "globex")
	// Reveal records in the key's own cell; the audit row goes to the control database.
	if got := globex.post(fmt.Sprintf("/keys/%d/reveal", dupB.ID), nil, true); got.Status != 200 {
		t.Fatalf("reveal: %d", got.Status)
	}
	// Hold: set in cell b, audited in the control database (cell a), not in cell b.
	if got := globex.post(fmt.Sprintf("/keys/%d/hold", dupB.ID), url.Values{"hold": {"1"}, "reason": {"litigation 42"}}, true); got.Status != 303 {
		t.Fatalf("hold: %d %s", got.Status, truncate(got.Body, 300))
	}
	var held bool
	b.cb.Raw(`SELECT legal_hold FROM idempotency_keys WHERE id = ?`, dupB.ID).Scan(&held)
	if !held {
		t.Error("hold: the key in cell b is not on hold")
	}
	inB := func(q string, args ...any) int64 {
		var n int64
		if err := b.cb.Raw(q, args...).Scan(&n).Error; err != nil {
			t.Fatal(err)
		}
		return n
	}
	target := fmt.Sprintf("key:%d", dupB.ID)
	for _, action := range []string{"key.reveal", "key.legal_hold.set"} {
		if n := b.count(`SELECT count(*) FROM audit_log WHERE action = ? AND target = ?`, action, target); n != 1 {
			t.Errorf("%s: %d audit rows in the control database, want 1", action, n)
		}
	}
	if n := inB(`SELECT count(*) FROM audit_log`); n != 0 {
		t.Errorf("cell b has %d audit rows, want none (the control database keeps them)", n)
	}
	if n := inB(`SELECT count(*) FROM key_events WHERE key_id = ? AND kind IN ('revealed', 'legal_hold_set')`, dupB.ID); n != 2 {
		t.Errorf("cell b: %d reveal/hold events of the key, want 2", n)
	}

	// Mark final: a retryably failed globex key in cell b, through the API's token and action.
	var ft struct {
		Token string `json:"token"`
	}
	_ = json.Unmarshal([]byte(globex.api(fmt.Sprintf("/api/v1/keys/%d/final", failed.ID), globexTok).Body), &ft)
	if got := globex.apiPost(fmt.Sprintf("/api/v1/keys/%d/final", failed.ID), globexTok,
		map[string]string{"token": ft.Token, "reason": "the channel confirmed it never arrived"}); got.Status != 200 {
		t.Fatalf("mark final in cell b: %d %s", got.Status, truncate(got.Body, 300))
	}
	var state string
	b.cb.Raw(`SELECT state FROM idempotency_keys WHERE id = ?`, failed.ID).Scan(&state)
	if state != string(claim.StateFailedFinal) {
		t.Errorf("marked final: the key in cell b is %s", state)
	}
	if n := b.count(`SELECT count(*) FROM audit_log WHERE target = ? AND action = 'key.mark_final'`, fmt.Sprintf("key:%d", failed.ID)); n != 1 {
		t.Errorf("mark final: %d audit rows in the control database, want 1", n)
	}

	// A replay of a globex key: requested and executed in cell b, listed and opened from there.
	var pv apiPreview
	_ = json.Unmarshal([]byte(globex.api(fmt.Sprintf("/api/v1/keys/%d/replay", retry.ID), globexTok).Body), &pv)
	if !pv.Allowed || pv.Token == "" {
		t.Fatalf("replay preview in cell b: %+v", pv)
	}
	got = globex.apiPost(fmt.Sprintf("/api/v1/keys/%d/replay", retry.ID), globexTok, map[string]string{"token": pv.Token, "reason": "customer asked"})
	if got.Status != 201 {
		t.Fatalf("replay in cell b: %d %s", got.Status, truncate(got.Body, 300))
	}
	req := decode[apiConfirm](t, got).Request
	if n := inB(`SELECT count(*) FROM replay_requests WHERE id = ? AND key_id = ?`, req.ID, retry.ID); n != 1 {
		t.Errorf("the replay request is not in cell b")
	}
	if got := globex.api(fmt.Sprintf("/api/v1/replays/%d", req.ID), globexTok); got.Status != 200 {
		t.Errorf("GET the replay request of cell b: %d", got.Status)
	}
	if got := acme.api(fmt.Sprintf("/api/v1/replays/%d", req.ID), acmeTok); got.Status != 404 {
		t.Errorf("acme operator GETs globex's replay request: %d, want 404", got.Status)
	}
	mustContain(t, "replays page", globex.get("/replays").Body, fmt.Sprintf("/replays/%d", req.ID))

	// A tenant move switched globex to cell a: the rows it left in cell b are no longer globex's.
	b.cells.move("globex", "a")
	if got, _ := b.walk(root, rootTok, "", 50, ""); !slices.Equal(got, b.allKeysIn(b.db)) {
		t.Errorf("after globex moved to a: %v, want cell a's keys only", got)
	}
	if got := root.get(fmt.Sprintf("/keys/%d", dupB.ID)); got.Status != 404 {
		t.Errorf("a key left in cell b by the move: %d, want 404", got.Status)
	}
}

// allKeysIn are db's key ids, newest first.
func (b *cellsBundle) allKeysIn(db *gorm.DB) []int64 {
	b.t.Helper()
	var ids []int64
	if err := db.Raw(`SELECT id FROM idempotency_keys ORDER BY created_at DESC, id DESC`).Scan(&ids).Error; err != nil {
		b.t.Fatal(err)
	}
	return ids
}

// seedFailedIn is seedFailed (retryably) through st, one cell's claim store.
func (b *cellsBundle) seedFailedIn(st *claim.Store, tenant, key string) *claim.Key {
	b.t.Helper()
	saved := b.claims
	b.claims = st
	defer func() { b.claims = saved }()
	return b.seedFailed(tenant, key, `{"amount":100,"currency":"EUR"}`, true)
}

// TestCells_BulkReplayAcrossCells: a bulk replay of keys in two cells previews them in the
// search's one order with the counts summed, carries each cell's plan and token, and starts a run
// in each cell — its items, its daemon's work and its replays in that cell, its audit rows in the
// control database. The first run's page links the other; each opens from its own cell.
func TestCells_BulkReplayAcrossCells(t *testing.T) {
	b := setupCells(t)
	b.addOperator("root", access.RoleAdmin, "*")
	var all []*claim.Key
	for i := range 2 {
		all = append(all, b.seedFailedIn(b.claims, "acme", fmt.Sprintf("ra-%d", i)), b.seedFailedIn(b.claimB, "globex", fmt.Sprintf("rg-%d", i)))
	}
	for _, k := range all {
		b.fakeOp.has(k, fmt.Sprintf("ch_%d", k.ID)) // the channel has each charge: the replay adopts it
	}
	root, tok := b.signIn("root"), b.token("root")
	got := root.apiPost("/api/v1/replays/bulk", tok, map[string]any{"filter": map[string]string{"state": "failed_retryable"}})
	if got.Status != 200 {
		t.Fatalf("preview: %d %s", got.Status, truncate(got.Body, 300))
	}
	p := decode[replay.BulkPlan](t, got)
	var ids []int64
	for _, it := range p.Items {
		ids = append(ids, it.KeyID)
	}
	if want := b.allKeys(); p.Total != 4 || !slices.Equal(ids, want) || p.Counts.ByState["failed_retryable"] != 4 {
		t.Fatalf("preview: total %d, keys %v, counts %v; want the 4 keys %v", p.Total, ids, p.Counts.ByState, want)
	}
	if !strings.HasPrefix(p.Plan, "a=b1|") || !strings.Contains(p.Plan, " b=b1|") || !strings.HasPrefix(p.Token, "a=") {
		t.Fatalf("plan %q / token %q: want a part per cell", truncate(p.Plan, 80), truncate(p.Token, 80))
	}
	mustContain(t, "keys page", root.get("/keys?state=failed_retryable").Body, `action="/replays/bulk"`)

	// A part started in another cell than the one that previewed it is refused.
	planA, _, _ := strings.Cut(p.Plan, " ")
	tokA, _, _ := strings.Cut(p.Token, " ")
	swapped := map[string]string{"plan": "b" + strings.TrimPrefix(planA, "a"), "token": "b" + strings.TrimPrefix(tokA, "a"), "reason": "x"}
	if got := root.apiPost("/api/v1/replays/bulk/start", tok, swapped); got.Status != 400 {
		t.Errorf("cell a's part started in cell b: %d %s, want 400", got.Status, truncate(got.Body, 200))
	}
	var runsInB int64
	b.cb.Raw(`SELECT count(*) FROM replay_bulk_runs`).Scan(&runsInB)
	if runsInB != 0 {
		t.Errorf("cell b holds %d bulk runs after the refused start", runsInB)
	}
	got = root.apiPost("/api/v1/replays/bulk/start", tok, map[string]string{"plan": p.Plan, "token": p.Token, "reason": "channel outage"})
	if got.Status != 202 {
		t.Fatalf("start: %d %s", got.Status, truncate(got.Body, 300))
	}
	runs := decode[struct {
		Runs []struct {
			ID    int64 `json:"id"`
			Total int   `json:"total"`
		} `json:"runs"`
	}](t, got).Runs
	if len(runs) != 2 || runs[0].ID >= 1<<40 || runs[1].ID < 1<<40 || runs[0].Total != 2 || runs[1].Total != 2 {
		t.Fatalf("start: %+v, want a run of 2 keys in cell a, then one in cell b", runs)
	}
	if again := root.apiPost("/api/v1/replays/bulk/start", tok, map[string]string{"plan": p.Plan, "token": p.Token, "reason": "twice"}); again.Status != 409 {
		t.Errorf("the preview started again: %d, want 409", again.Status)
	}
	b.runJobs()
	startReplica(t, b.cb, "replica-b", map[daemon.Job]string{replay.NewBulkJob(b.srv.cells.byName["b"].replays): replay.BulkJobSpec})
	for i, db := range []*gorm.DB{b.db, b.cb} {
		id := runs[i].ID
		pgtest.Await(t, db, 15*time.Second, fmt.Sprintf("bulk run %d to finish", id), func() bool {
			var n int64
			db.Raw(`SELECT count(*) FROM replay_bulk_runs WHERE id = ? AND state = 'done'`, id).Scan(&n)
			return n == 1
		}, "replay_bulk_runs")
	}
	for name, db := range map[string]*gorm.DB{"a": b.db, "b": b.cb} {
		var n int64
		db.Raw(`SELECT count(*) FROM idempotency_keys WHERE state = 'completed' AND key LIKE 'r_-%'`).Scan(&n)
		if n != 2 {
			t.Errorf("cell %s: %d keys completed by the replay, want 2", name, n)
		}
	}
	page := root.get(fmt.Sprintf("/replays/bulk/%d?with=%d", runs[0].ID, runs[1].ID))
	mustContain(t, "first run's page", page.Body, fmt.Sprintf(`href="/replays/bulk/%d"`, runs[1].ID))
	if got := root.api(fmt.Sprintf("/api/v1/replays/bulk/%d", runs[1].ID), tok); got.Status != 200 || !strings.Contains(got.Body, `"state":"done"`) {
		t.Errorf("cell b's run: %d %s", got.Status, truncate(got.Body, 300))
	}
	if n := b.count(`SELECT count(*) FROM audit_log WHERE action = 'replay.bulk_start'`); n != 2 {
		t.Errorf("%d replay.bulk_start audit rows in the control database, want 2", n)
	}
	var inB int64
	b.cb.Raw(`SELECT count(*) FROM audit_log`).Scan(&inB)
	if inB != 0 {
		t.Errorf("cell b holds %d audit rows, want none", inB)
	}
}

// TestCells_KeyPageNamesItsCellAndCellsAddedLaterAreRead: the key page says which cell holds the
// key, and a deployment's panels read the key's domain rows in that cell (KeyCell). A cell the
// map adds while the console runs is searched and opened from the next request on.
func TestCells_KeyPageNamesItsCellAndCellsAddedLaterAreRead(t *testing.T) {
	panel := func(ctx context.Context, k *claim.Key) (*KeyPanel, error) {
		c, ok := KeyCell(ctx)
		if !ok {
			return nil, fmt.Errorf("no cell for key %d", k.ID)
		}
		var n int64
		if err := c.DB.WithContext(ctx).Raw(`SELECT count(*) FROM idempotency_keys WHERE id = ?`, k.ID).Scan(&n).Error; err != nil {
			return nil, err
		}
		return &KeyPanel{ID: "where", Title: "Cell", Columns: []string{"Cell"}, Rows: [][]Cell{{Data(fmt.Sprintf("in %s: %d", c.Name, n))}}}, nil
	}
	b := setupCells(t, func(cfg *Config) { cfg.KeyPanels = []KeyPanelFunc{panel} })
	b.addOperator("root", access.RoleAdmin, "*")
	root, tok := b.signIn("root"), b.token("root")
	ka, kb := b.seedIn(b.claims, "acme", "where-a", true), b.seedIn(b.claimB, "globex", "where-b", true)
	for k, cell := range map[int64]string{ka.ID: "a", kb.ID: "b"} {
		page := root.get(fmt.Sprintf("/keys/%d", k))
		mustContain(t, "key page", page.Body, `id="key-cell">`+cell+`<`, fmt.Sprintf("in %s: 1", cell))
	}

	// Cell c joins the map: umbrella's keys are there.
	cc := pgtest.New(t)
	if err := cc.Exec(`SELECT setval(format('%I.%I', schemaname, sequencename), 2::bigint << 40) FROM pg_sequences
		WHERE max_value > 2::bigint << 40`).Error; err != nil {
		t.Fatal(err)
	}
	claimC, err := claim.NewStore(cc, claim.Config{DigestSecret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	kc := b.seedIn(claimC, "umbrella", "where-c", true)
	if got, _ := b.walk(root, tok, "tenant=umbrella", 10, ""); len(got) != 0 {
		t.Fatalf("umbrella's keys before cell c joined: %v", got)
	}
	b.cells.add(TenantCell{Name: "c", DB: pgtest.Tenant(t, cc)}, "umbrella")
	if got, _ := b.walk(root, tok, "", 10, ""); !slices.Contains(got, kc.ID) || len(got) != 3 {
		t.Errorf("search after cell c joined: %v, want the three cells' keys", got)
	}
	mustContain(t, "cell c's key page", root.get(fmt.Sprintf("/keys/%d", kc.ID)).Body, `id="key-cell">c<`, "in c: 1")
}

// TestCells_ACellDownDoesNotStopTheOthers: with cell b unreachable (its primary failing over), a
// key of cell a still opens, previews its replay and is acted on — a lookup by id answers from
// the cell that has the object without waiting for the others — and a key of cell b fails
// without being called not found.
func TestCells_ACellDownDoesNotStopTheOthers(t *testing.T) {
	b := setupCells(t)
	b.addOperator("root", access.RoleAdmin, "*")
	root, tok := b.signIn("root"), b.token("root")
	ka := b.seedFailedIn(b.claims, "acme", "up")
	kb := b.seedFailedIn(b.claimB, "globex", "down")
	sqlDB, err := b.cells.Cells()[1].DB.DB()
	if err != nil {
		t.Fatal(err)
	}
	sqlDB.Close() // cell b is gone
	if got := root.get(fmt.Sprintf("/keys/%d", ka.ID)); got.Status != 200 {
		t.Errorf("cell a's key page with cell b down: %d %s", got.Status, truncate(got.Body, 300))
	}
	if got := root.api(fmt.Sprintf("/api/v1/keys/%d/replay", ka.ID), tok); got.Status != 200 || !strings.Contains(got.Body, `"token"`) {
		t.Errorf("cell a's replay preview with cell b down: %d %s", got.Status, truncate(got.Body, 300))
	}
	if got := root.post(fmt.Sprintf("/keys/%d/hold", ka.ID), url.Values{"hold": {"1"}, "reason": {"audit 7"}}, true); got.Status != 303 {
		t.Errorf("hold a cell a key with cell b down: %d %s", got.Status, truncate(got.Body, 300))
	}
	if got := root.api(fmt.Sprintf("/api/v1/keys/%d", kb.ID), tok); got.Status == 200 || got.Status == 404 {
		t.Errorf("cell b's key with cell b down: %d, want an error that is not not found", got.Status)
	}
	// The keys and findings pages list what the cells that answer hold, and name the one left out.
	for _, path := range []string{"/keys", "/reconcile/findings"} {
		if got := root.get(path); got.Status != 200 || !strings.Contains(got.Body, `id="cells-left-out"`) {
			t.Errorf("%s with cell b down: %d, want the page naming cell b", path, got.Status)
		}
	}
	mustContain(t, "keys page with cell b down", root.get("/keys").Body, fmt.Sprintf("/keys/%d", ka.ID))
	if got := root.api("/api/v1/keys", tok); got.Status == 200 {
		t.Errorf("the keys API with cell b down: 200, want an error (an API answers whole or not at all)")
	}
	// The dashboard counts what the cells that answer hold, and names the one left out.
	if got := root.get("/"); got.Status != 200 || !strings.Contains(got.Body, `id="cells-unavailable"`) {
		t.Errorf("dashboard with cell b down: %d, want the page naming cell b", got.Status)
	}
	got := root.api("/api/v1/dashboard", tok)
	d := decode[struct {
		Attention   map[string]int64 `json:"attention"`
		Unavailable []string         `json:"cells_unavailable"`
	}](t, got)
	if got.Status != 200 || !slices.Equal(d.Unavailable, []string{"b"}) || d.Attention["failed_retryable"] != 1 {
		t.Errorf("dashboard API with cell b down: %d %+v, want cell a's 1 failed retryable key and cell b named", got.Status, d)
	}
}

// electLeaderInEachCell starts a daemon replica in each cell — replica-a in cell a (the bundle's
// daemon), replica-b in cell b — waits until each is its cell's leader, and returns the two
// leaders' ids, cell a's first.
func (b *cellsBundle) electLeaderInEachCell() (leaderA, leaderB string) {
	b.t.Helper()
	b.runJobs()
	startReplica(b.t, b.cb, "replica-b", map[daemon.Job]string{replay.NewBulkJob(b.srv.cells.byName["b"].replays): replay.BulkJobSpec})
	pgtest.Await(b.t, b.cb, 10*time.Second, "cell b's leader", func() bool {
		var n int64
		b.cb.Raw(`SELECT count(*) FROM daemon_leader`).Scan(&n)
		return n == 1
	}, "daemon_leader")
	for _, l := range []struct {
		db *gorm.DB
		id *string
	}{{b.db, &leaderA}, {b.cb, &leaderB}} {
		if err := l.db.Raw(`SELECT leader_id FROM daemon_leader`).Scan(l.id).Error; err != nil || *l.id == "" {
			b.t.Fatalf("a cell's leader: %q (%v)", *l.id, err)
		}
	}
	return leaderA, leaderB
}

// TestCells_JobsShowEachCellsDaemon: one leader per cell — the jobs page and /api/v1/jobs show
// each cell's leader, schedules and failed last runs, and the dashboard's failed jobs count
// every cell's.
func TestCells_JobsShowEachCellsDaemon(t *testing.T) {
	b := setupCells(t)
	b.addOperator("root", access.RoleAdmin, "*")
	root, tok := b.signIn("root"), b.token("root")
	b.electLeaderInEachCell()
	// Cell b's bulk replay schedule last failed.
	if err := b.cb.Exec(`INSERT INTO job_runs (schedule, job, trigger, replica, status, deadline_at, finished_at, error)
		SELECT name, job, 'run_now', 'replica-b', 'failed', now(), now(), 'boom' FROM schedules WHERE job = ?`, replay.BulkJobName).Error; err != nil {
		t.Fatal(err)
	}
	type jobs struct {
		Runs []struct {
			ID   int64  `json:"id"`
			Cell string `json:"cell"`
		} `json:"runs"`
		Control string `json:"control"`
		Cells   []struct {
			Name   string `json:"name"`
			Leader *struct {
				ID string `json:"id"`
			} `json:"leader"`
			Schedules int `json:"schedules"`
			Failed    int `json:"failed"`
		} `json:"cells"`
	}
	j := decode[jobs](t, root.api("/api/v1/jobs", tok))
	if j.Control != "a" || len(j.Cells) != 2 || j.Cells[0].Name != "a" || j.Cells[1].Name != "b" {
		t.Fatalf("jobs: %+v, want cells a (control) and b", j)
	}
	for _, c := range j.Cells {
		if c.Leader == nil || c.Schedules == 0 {
			t.Errorf("cell %s: leader %v, %d schedules: want its own leader and schedules", c.Name, c.Leader, c.Schedules)
		}
	}
	if j.Cells[0].Failed != 0 || j.Cells[1].Failed != 1 {
		t.Errorf("failed last runs: a %d, b %d; want 0 and 1", j.Cells[0].Failed, j.Cells[1].Failed)
	}
	page := root.get("/jobs").Body
	mustContain(t, "jobs page", page, `id="cell-daemon-a"`, `id="cell-daemon-b"`, j.Cells[1].Leader.ID)
	// One row per cell with its own leader (since when) and replicas; no control-only leader.
	for _, c := range []struct{ cell, leader, replica string }{{"a", j.Cells[0].Leader.ID, "replica-a"}, {"b", j.Cells[1].Leader.ID, "replica-b"}} {
		row := rowOf(page, `id="cell-daemon-`+c.cell+`"`)
		mustContain(t, "cell "+c.cell+"'s daemon row", row, c.leader, `<span class="mono">`+c.replica+`</span>`, `<span class="badge">leader</span>`, "<time")
		other := map[string]string{"a": "replica-b", "b": "replica-a"}[c.cell]
		if strings.Contains(row, other) {
			t.Errorf("cell %s's row lists %s, another cell's replica: %s", c.cell, other, row)
		}
	}
	mustContain(t, "cell a's daemon row", rowOf(page, `id="cell-daemon-a"`), "control")
	if strings.Contains(page, `id="leader"`) || strings.Contains(rowOf(page, `id="cell-daemon-b"`), ">control<") {
		t.Error("the jobs page across cells still shows a control-only leader, or marks cell b the control cell")
	}
	req, _ := http.NewRequest("GET", b.ts.URL+"/jobs", nil)
	req.Header.Set("Accept-Language", "zh-CN")
	mustContain(t, "jobs page in zh-CN", root.do(req).Body, "各单元的守护进程", "每个单元都有自己的领导者、副本和作业", "控制单元")
	// Cell b's runs are listed with the others, marked with their cell, and open from there.
	var failedRun int64
	b.cb.Raw(`SELECT id FROM job_runs WHERE status = 'failed'`).Scan(&failedRun)
	if !slices.ContainsFunc(j.Runs, func(r struct {
		ID   int64  `json:"id"`
		Cell string `json:"cell"`
	}) bool {
		return r.ID == failedRun && r.Cell == "b"
	}) {
		t.Errorf("/api/v1/jobs runs %+v: want cell b's run %d", j.Runs, failedRun)
	}
	mustContain(t, "jobs page", page, fmt.Sprintf(`href="/jobs/runs/%d"`, failedRun), `<span class="badge cell">b</span>`)
	if got := root.get(fmt.Sprintf("/jobs/runs/%d", failedRun)); got.Status != 200 || !strings.Contains(got.Body, "boom") {
		t.Errorf("cell b's failed run page: %d", got.Status)
	}
	type dash struct {
		Attention map[string]int64 `json:"attention"`
	}
	if d := decode[dash](t, root.api("/api/v1/dashboard", tok)); d.Attention["failed_jobs"] != 1 {
		t.Errorf("dashboard failed jobs: %d, want cell b's 1", d.Attention["failed_jobs"])
	}
}

// TestCells_RetentionAndConsumersAcrossCells: each cell's daemon purges by its own policies and
// floor, so the console saves and deletes them in every cell; a dry run counts in every cell;
// the consumers page reads each cell's records of the tenants it holds.
func TestCells_RetentionAndConsumersAcrossCells(t *testing.T) {
	b := setupCells(t)
	b.addOperator("root", access.RoleAdmin, "*")
	b.addOperator("globex-op", access.RoleOperator, "globex")
	root, tok := b.signIn("root"), b.token("root")
	ctx := context.Background()
	policy := map[string]string{"operation": "payment.charge", "state": "completed", "keep_response": "90d", "keep_key": "120d"}
	if got := root.apiPost("/api/v1/retention/policies", tok, policy); got.Status/100 != 2 {
		t.Fatalf("save a policy: %d %s", got.Status, truncate(got.Body, 300))
	}
	if got := root.post("/retention/floor", url.Values{"client_retry": {"2d"}, "backfill": {"3d"}, "reconciliation_lag": {"4d"}}, true); got.Status != 303 {
		t.Fatalf("set the floor: %d %s", got.Status, truncate(got.Body, 300))
	}
	for name, db := range map[string]*gorm.DB{"a": b.db, "b": b.cb} {
		set, err := retention.ListPolicies(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		if len(set.Policies) != 1 || set.Policies[0].KeepKey != 120*24*time.Hour || set.Floor.Backfill != 3*24*time.Hour {
			t.Errorf("cell %s: policies %+v, floor %+v: want the saved policy and floor", name, set.Policies, set.Floor)
		}
	}
	if n := b.count(`SELECT count(*) FROM audit_log WHERE action IN ('retention.policy.save', 'retention.floor.set')`); n != 2 {
		t.Errorf("%d audit rows of the policy and the floor, want 2 (once, in the control database)", n)
	}
	if got := root.post("/retention/policies/delete", url.Values{"operation": {"payment.charge"}, "state": {"completed"}}, true); got.Status != 303 {
		t.Fatalf("delete the policy: %d %s", got.Status, truncate(got.Body, 300))
	}
	if set, _ := retention.ListPolicies(ctx, b.cb); len(set.Policies) != 0 {
		t.Errorf("cell b still has %+v after the delete", set.Policies)
	}
	var logsB int64
	if got := root.api("/api/v1/retention/preview", tok); got.Status != 200 {
		t.Errorf("dry run: %d %s", got.Status, truncate(got.Body, 300))
	}
	b.cb.Raw(`SELECT count(*) FROM purge_log WHERE dry_run`).Scan(&logsB)
	if logsB != 1 {
		t.Errorf("cell b: %d dry runs logged, want the console's 1", logsB)
	}

	// Consumers: one record in each cell; globex's operator sees cell b's only.
	for db, tenant := range map[*gorm.DB]string{b.db: "acme", b.cb: "globex"} {
		st, err := claim.NewStore(db, claim.Config{DigestSecret: testSecret})
		if err != nil {
			t.Fatal(err)
		}
		saved := b.claims
		b.claims = st
		k := b.seedKey(tenant, "payment.charge", "order-"+tenant, `{"amount":1,"currency":"EUR"}`, true)
		b.claims = saved
		if err := db.Exec(`INSERT INTO consumed_messages (consumer, business_key, message_id, tenant) VALUES ('shipping', ?, ?, ?)`,
			"order-"+tenant, fmt.Sprint(k.ID), tenant).Error; err != nil {
			t.Fatal(err)
		}
	}
	page := root.get("/consumers?key=order-globex").Body
	mustContain(t, "consumers page", page, "acme", "globex", "order-globex")
	gp := b.signIn("globex-op").get("/consumers").Body
	mustContain(t, "globex's consumers page", gp, "globex")
	mustNotContain(t, "globex's consumers page", gp, ">acme<")
}

// rowOf is the table row of page whose tag holds attr, up to its </tr> ("" when none).
func rowOf(page, attr string) string {
	i := strings.Index(page, attr)
	if i < 0 {
		return ""
	}
	j := strings.Index(page[i:], "</tr>")
	if j < 0 {
		return page[i:]
	}
	return page[i : i+j]
}
