package console

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"

	"gorm.io/gorm"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/internal/tenantdb"
	"github.com/idemops/idemops/keys"
	"github.com/idemops/idemops/reconcile"
	"github.com/idemops/idemops/replay"
	"github.com/idemops/idemops/retention"
)

// Tenant cells (docs/SCALING.md, package cells): each tenant's keys live in exactly one of
// several PostgreSQL databases. The console keeps operators, sessions, the audit log, the daemon's
// jobs and the reconciliation configuration in one control database (Config.DB) and reads keys
// where they live:
//
//   - key search and find by key ask every cell holding one of the operator's tenants, at once,
//     each for the tenants it holds, and merge the answers (keys.MergePages: the same page size
//     and keyset cursor, exact at any depth);
//   - a key named by id (its page, reveal, downstream check, hold, mark final, release, replay)
//     is looked up in the operator's cells — ids are unique across cells — and everything after
//     happens in that key's own cell, through that cell's claim store and replay workflow; their
//     audit rows go to the control database (audit.Log.Elsewhere);
//   - the dashboard's key counts are the sums over the operator's cells.
//
// A key counts as a cell's only while the map places its tenant there: rows a tenant move left
// behind in its old cell are not shown twice. Without Config.Cells there is one cell, the control
// database itself, and every read is exactly the one-database read.

// TenantCell is one tenant cell as the console reads it.
type TenantCell struct {
	// Name is the cell's name in the map.
	Name string
	// DB is the cell's database, opened by tenantdb.Open like Config.DB.
	DB *gorm.DB
}

// Cells is what the console needs from a deployment of tenant cells.
type Cells interface {
	// Cells are every cell. New reads them once: the set of cells is fixed while it runs.
	Cells() []TenantCell
	// Placement maps every tenant to the name of the cell holding its keys now. It is asked on
	// every request that reads keys, so a tenant move's switch is followed at once.
	Placement() map[string]string
}

// cell is a cell with the stores the console reads and changes its keys through.
type cell struct {
	name    string
	db      *gorm.DB
	claims  *claim.Store
	replays *replay.Workflow
	// audit is the log key actions in this cell append to, in their transaction: the control
	// database's (apart from a cell's transactions, audit.Log.Elsewhere, when that is not this).
	audit *audit.Log
	scope *access.Scope
	// recon reads and changes the findings the cell matched (its claim store recovers through;
	// its audit rows go where audit's do).
	recon *reconcile.Reconciler
	// purge counts a dry run of the cell's keys (nil for the control database: Server.purge).
	purge *retention.PurgeJob
}

// cellSet is the console's cells: one (the control database) without Config.Cells. Cells the
// map adds while the console runs join it the first time the placement names them (follow).
type cellSet struct {
	cells Cells // nil: one cell
	// newCell builds a cell's stores (Server.newCell).
	newCell func(TenantCell) (*cell, error)
	log     *slog.Logger

	mu     sync.RWMutex
	all    []*cell // append only: the first is the control database's without Config.Cells
	byName map[string]*cell
}

// newCellSet builds the cells of cfg around the control database's stores.
func (s *Server) newCellSet(cfg Config) (*cellSet, error) {
	control := &cell{db: s.db, claims: s.claims, replays: s.replays, audit: s.audit, scope: s.scope, recon: s.recon}
	if cfg.Cells == nil {
		return &cellSet{all: []*cell{control}}, nil
	}
	cs := &cellSet{cells: cfg.Cells, byName: map[string]*cell{}, newCell: s.newCell, log: cfg.Logger}
	for _, c := range cfg.Cells.Cells() {
		if cs.byName[c.Name] != nil {
			return nil, fmt.Errorf("console: cell %q is listed twice", c.Name)
		}
		cl, err := s.newCell(c)
		if err != nil {
			return nil, err
		}
		cs.all = append(cs.all, cl)
		cs.byName[c.Name] = cl
	}
	if len(cs.all) == 0 {
		return nil, errors.New("console: Config.Cells has no cell")
	}
	return cs, nil
}

// newCell builds the console's stores on cell c: its claim store, replay workflow and
// reconciler, their audit rows going to the control database.
func (s *Server) newCell(c TenantCell) (*cell, error) {
	switch {
	case c.Name == "":
		return nil, errors.New("console: a cell has no name")
	case c.DB == nil || !tenantdb.Scoped(c.DB):
		return nil, fmt.Errorf("console: cell %q: its DB must be opened by tenantdb.Open", c.Name)
	}
	st, err := claim.NewStore(c.DB, s.claims.Config())
	if err != nil {
		return nil, fmt.Errorf("console: cell %q: %w", c.Name, err)
	}
	in := s.audit.Elsewhere()
	cl := &cell{name: c.Name, db: c.DB, claims: st, audit: in, scope: access.NewScope(c.DB),
		replays: s.replays.In(c.DB, st, in), recon: s.recon}
	if c.DB != s.db {
		rc := s.recon.Config()
		rc.Store, rc.Auditor, rc.Cells = st, reconcile.LogAuditor{Log: in, DB: c.DB}, nil
		if cl.recon, err = reconcile.New(c.DB, rc); err != nil {
			return nil, fmt.Errorf("console: cell %q: %w", c.Name, err)
		}
		if cl.purge, err = retention.NewPurgeJob(c.DB, retention.Config{CountTimeout: s.cfg.PreviewTimeout, Logger: s.cfg.Logger}); err != nil {
			return nil, fmt.Errorf("console: cell %q: %w", c.Name, err)
		}
	}
	return cl, nil
}

// follow adds the cells placement names that the console does not have yet (the map grew
// while it ran), from Cells.Cells(); a cell that cannot be built is logged and asked again next
// time. It returns the cells, in the order they joined.
func (cs *cellSet) follow(placement map[string]string) []*cell {
	cs.mu.RLock()
	all, known := cs.all, true
	for _, name := range placement {
		known = known && cs.byName[name] != nil
	}
	cs.mu.RUnlock()
	if known {
		return all
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, c := range cs.cells.Cells() {
		if cs.byName[c.Name] != nil {
			continue
		}
		cl, err := cs.newCell(c)
		if err != nil {
			cs.log.Error("console: a cell the map added", "cell", c.Name, "err", err)
			continue
		}
		cs.all = append(cs.all, cl)
		cs.byName[c.Name] = cl
		cs.log.Info("console: reading a cell the map added", "cell", c.Name)
	}
	return cs.all
}

// named is the cell called name (nil: none).
func (cs *cellSet) named(name string) *cell {
	cs.mu.RLock()
	defer cs.mu.RUnlock()
	return cs.byName[name]
}

// close stops the cells' replay workflows (the control database's is the server's own).
func (cs *cellSet) close() {
	if cs.cells == nil {
		return
	}
	cs.mu.RLock()
	defer cs.mu.RUnlock()
	for _, c := range cs.all {
		c.replays.Close()
	}
}

// scopedCell is a cell and the part of a scope it holds.
type scopedCell struct {
	*cell
	held keys.Scope // the tenants of the scope this cell holds
}

// For returns the cells holding tenants of scope (only tenant's when tenant is set), each with
// the scope narrowed to the tenants it holds, in the map's order. With one cell: that cell and
// scope as they are.
func (cs *cellSet) For(scope keys.Scope, tenant string) []scopedCell {
	if cs.cells == nil {
		return []scopedCell{{cs.all[0], scope}}
	}
	placement := cs.cells.Placement()
	all := cs.follow(placement)
	held := map[string][]string{}
	for t, name := range placement {
		if (tenant == "" || t == tenant) && scope.MaySee(t) {
			held[name] = append(held[name], t)
		}
	}
	var out []scopedCell
	for _, c := range all {
		if ts := held[c.name]; len(ts) > 0 {
			slices.Sort(ts)
			out = append(out, scopedCell{c, keys.Scope{Tenants: ts}})
		}
	}
	return out
}

// everywhere is every cell, each with the whole scope: for what stays in the cell that made it
// when its tenant moves — findings, recon runs, bulk runs of findings — which a read asks of
// every cell, its filter scoping it. With one cell: that cell.
func (cs *cellSet) everywhere() []scopedCell {
	var all []*cell
	if cs.cells == nil {
		all = cs.all
	} else {
		all = cs.follow(cs.cells.Placement())
	}
	out := make([]scopedCell, len(all))
	for i, c := range all {
		out[i] = scopedCell{cell: c}
	}
	return out
}

// holds reports whether c holds tenant's keys now (always, with one cell).
func (cs *cellSet) holds(c *cell, tenant string) bool {
	return cs.cells == nil || cs.cells.Placement()[tenant] == c.name
}

// ofKey is the cell holding k's tenant now; with one cell, that cell. Errors: ErrNotFound
// when no cell holds it (the map dropped the tenant).
func (cs *cellSet) ofKey(k *claim.Key) (*cell, error) {
	if cs.cells == nil {
		return cs.all[0], nil
	}
	placement := cs.cells.Placement()
	cs.follow(placement)
	if c := cs.named(placement[k.Tenant]); c != nil {
		return c, nil
	}
	return nil, fmt.Errorf("key %d: its tenant is in no cell: %w", k.ID, ErrNotFound)
}

// eachCell runs read on every cell of cs at once and returns their answers in cs's order (with
// one database, read runs in the caller's goroutine), and their errors joined — or, under
// leaveOutFailedCells, a failed cell's zero answer, the cell named there.
func eachCell[T any](ctx context.Context, cs []scopedCell, read func(context.Context, scopedCell) (T, error)) ([]T, error) {
	out := make([]T, len(cs))
	if len(cs) == 1 && cs[0].name == "" { // one database: the read as it is
		v, err := read(ctx, cs[0])
		out[0] = v
		return out, err
	}
	fails := make([]error, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() { out[i], fails[i] = read(ctx, c) })
	}
	wg.Wait()
	if m, ok := ctx.Value(missedKey{}).(*missedCells); ok {
		for i, err := range fails {
			if err != nil && ctx.Err() == nil {
				m.add(cs[i].name, err)
				var zero T
				out[i], fails[i] = zero, nil // its answer is the zero value: left out
			}
		}
	}
	return out, errors.Join(fails...)
}

// fromCell is one item of a cell's answer with the index of that cell.
type fromCell[T any] struct {
	v    T
	cell int
}

// flatten is the cells' answers one after the other, each item with its cell's index.
func flatten[T any](got [][]T) []fromCell[T] {
	var out []fromCell[T]
	for i, items := range got {
		for _, v := range items {
			out = append(out, fromCell[T]{v, i})
		}
	}
	return out
}

// missedKey carries a *missedCells: the reads of a context made by leaveOutFailedCells.
type missedKey struct{}

// missedCells are the cells a read left out because they did not answer.
type missedCells struct {
	mu    sync.Mutex
	names []string
	log   *slog.Logger
}

func (m *missedCells) add(name string, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !slices.Contains(m.names, name) {
		m.names = append(m.names, name)
		m.log.Warn("console: a cell did not answer; its figures are left out", "cell", name, "err", err)
	}
}

// list is the cells left out, by name.
func (m *missedCells) list() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Sorted(slices.Values(m.names))
}

// leaveOutFailedCells makes eachCell's reads under ctx leave out a cell that fails (when there
// are several) instead of failing: the dashboard's, so that one cell failing over does not take
// every tenant's dashboard with it. The page names the cells left out.
func (s *Server) leaveOutFailedCells(ctx context.Context) (context.Context, *missedCells) {
	m := &missedCells{log: s.cfg.Logger}
	if s.cells.cells == nil {
		return ctx, m
	}
	return context.WithValue(ctx, missedKey{}, m), m
}

// findIn looks the object id of kind (a key, a replay request) up for op with read, and returns
// it with its cell. With one database: read there, given to op only within its tenants
// (readScoped). Across cells: asked in the cells of op's scope at once, the one cell whose copy
// belongs to it (its tenant's, by the map) answering. Not found anywhere, or only in a cell its
// tenant has left, is ErrNotFound.
func findIn[T any](ctx context.Context, cs *cellSet, op *access.Operator, kind access.ObjectKind, id int64,
	read func(context.Context, *cell, int64) (T, error), tenant func(T) string) (T, *cell, error) {
	var none T
	if cs.cells == nil {
		c := cs.all[0]
		v, err := readScoped(ctx, op, kind, id, func(ctx context.Context, id int64) (T, error) { return read(ctx, c, id) }, tenant)
		return v, c, err
	}
	in := cs.For(keyScope(op), "")
	v, i, err := firstIn(ctx, in, func(ctx context.Context, c scopedCell) (T, bool, error) {
		v, err := read(ctx, c.cell, id)
		if errs.KindOf(err) == errs.NotFound {
			return none, false, nil
		}
		if err != nil {
			return none, false, err
		}
		return v, cs.holds(c.cell, tenant(v)), nil
	})
	switch {
	case i < 0 && err != nil:
		return none, nil, err
	case i < 0:
		return none, nil, fmt.Errorf("%s %d: %w", kind, id, ErrNotFound)
	}
	if err := access.Decide(op, kind, strconv.FormatInt(id, 10), []string{tenant(v)}, false); err != nil {
		return none, nil, err
	}
	return v, in[i].cell, nil
}

// firstIn asks every cell of in at once with read and returns the first answer that found the
// object (ok) and its cell's index, without waiting for the other cells: ids are unique across
// cells, so a cell that is down or failing over does not hold up the one that has the object.
// Found nowhere: index -1 and the cells' errors joined (nil when every cell said not found).
func firstIn[T any](ctx context.Context, in []scopedCell, read func(context.Context, scopedCell) (T, bool, error)) (T, int, error) {
	var none T
	if len(in) == 1 {
		v, ok, err := read(ctx, in[0])
		if ok {
			return v, 0, nil
		}
		return none, -1, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // the cells not heard yet stop asking
	type answer struct {
		v   T
		ok  bool
		err error
		i   int
	}
	answers := make(chan answer, len(in))
	for i, c := range in {
		go func() {
			v, ok, err := read(ctx, c)
			answers <- answer{v, ok, err, i}
		}()
	}
	var fails []error
	for range in {
		a := <-answers
		if a.ok {
			return a.v, a.i, nil
		}
		if a.err != nil {
			fails = append(fails, fmt.Errorf("cell %s: %w", in[a.i].name, a.err))
		}
	}
	return none, -1, errors.Join(fails...)
}

// cellKinds are the objects that live in the cells of their tenants (a key and its replay
// requests); stayKinds live in the cell that made them, where they stay when their tenant moves
// (a finding, the recon run that found it, a bulk run of findings or of replays, a daemon's
// job run). The rest live in the control
// database.
var (
	cellKinds = map[access.ObjectKind]bool{access.ObjKey: true, access.ObjReplay: true}
	stayKinds = map[access.ObjectKind]bool{access.ObjFinding: true, access.ObjReconRun: true, access.ObjFindingBulk: true,
		access.ObjBulkRun: true, access.ObjJobRun: true}
)

// scopeCheck is access.Scope.Check of kind:ref for op, asked of the cell holding the object when
// it lives in the cells: for a key or a replay request, the first of op's cells that has it, for
// a tenant that cell holds; for a finding, a recon run or a bulk run of findings, the cell that
// has it, of all of them (ids are unique across cells).
func (s *Server) scopeCheck(ctx context.Context, op *access.Operator, kind access.ObjectKind, ref string, act bool) error {
	if s.cells.cells == nil || !cellKinds[kind] && !stayKinds[kind] {
		return s.scope.Check(ctx, op, kind, ref, act)
	}
	in, kindTenants := s.cells.For(keyScope(op), ""), func(ctx context.Context, c scopedCell) ([]string, bool, error) {
		tenants, err := c.scope.Tenants(ctx, kind, ref)
		switch {
		case errors.Is(err, access.ErrNotFound):
			return nil, false, nil
		case err != nil:
			return nil, false, err
		}
		// A copy a tenant move left behind is not the object.
		return tenants, len(tenants) == 0 || slices.ContainsFunc(tenants, func(t string) bool { return s.cells.holds(c.cell, t) }), nil
	}
	if stayKinds[kind] {
		in, kindTenants = s.cells.everywhere(), func(ctx context.Context, c scopedCell) ([]string, bool, error) {
			tenants, err := s.stayTenants(ctx, c.cell, kind, ref)
			if errs.KindOf(err) == errs.NotFound {
				return nil, false, nil
			}
			return tenants, err == nil, err
		}
	}
	tenants, i, err := firstIn(ctx, in, kindTenants)
	switch {
	case i < 0 && err != nil:
		return err
	case i < 0:
		return access.NotFoundError(kind, ref)
	}
	return access.Decide(op, kind, ref, tenants, act)
}

// stayTenants resolves the tenant set of a stayKinds object in cell c (access.Scope.Tenants
// there), except that a channel account's tenants are the control database's: a cell holds a
// mirror of the account as the last statement it matched saw it.
func (s *Server) stayTenants(ctx context.Context, c *cell, kind access.ObjectKind, ref string) ([]string, error) {
	id, err := strconv.ParseInt(ref, 10, 64)
	if err != nil || id <= 0 {
		return nil, access.ErrNotFound
	}
	switch kind {
	case access.ObjFinding:
		f, err := c.recon.GetFinding(ctx, id)
		if err != nil {
			return nil, err
		}
		if f.Tenant == nil && f.KeyID == nil { // about the statement: its channel account's
			return s.scope.ChannelTenants(ctx, f.Channel)
		}
	case access.ObjReconRun:
		run, err := c.recon.GetRun(ctx, id)
		if err != nil {
			return nil, err
		}
		if run.Channel == "" {
			return []string{access.EveryTenant}, nil
		}
		return s.scope.ChannelTenants(ctx, run.Channel)
	}
	return c.scope.Tenants(ctx, kind, ref)
}

// findingIn reads finding id with the cell it lives in, for op: ErrNotFound outside op's scope
// (the route's check passed already; this is the same decision for callers without a route).
func (s *Server) findingIn(ctx context.Context, op *access.Operator, id int64) (*reconcile.Finding, *cell, error) {
	ref := strconv.FormatInt(id, 10)
	if err := s.scopeCheck(ctx, op, access.ObjFinding, ref, false); err != nil {
		return nil, nil, err
	}
	if s.cells.cells == nil {
		f, err := s.recon.GetFinding(ctx, id)
		return f, s.cells.all[0], err
	}
	return stayIn(ctx, s.cells, func(ctx context.Context, c *cell) (*reconcile.Finding, error) { return c.recon.GetFinding(ctx, id) },
		access.NotFoundError(access.ObjFinding, ref))
}

// stayIn reads an object of the stayKinds with read in every cell at once: the cell that has it
// answers (ids are unique across cells), else notFound, or the cells' errors when some failed.
func stayIn[T any](ctx context.Context, cs *cellSet, read func(context.Context, *cell) (T, error), notFound error) (T, *cell, error) {
	in := cs.everywhere()
	v, i, err := firstIn(ctx, in, func(ctx context.Context, c scopedCell) (T, bool, error) {
		v, err := read(ctx, c.cell)
		if errs.KindOf(err) == errs.NotFound {
			return v, false, nil
		}
		return v, err == nil, err
	})
	switch {
	case i >= 0:
		return v, in[i].cell, nil
	case err != nil:
		return v, nil, err
	}
	return v, nil, notFound
}

// runIn reads recon run id with the cell it lives in (the route's scope check passed).
func (s *Server) runIn(ctx context.Context, id int64) (*reconcile.Run, *cell, error) {
	if s.cells.cells == nil {
		run, err := s.recon.GetRun(ctx, id)
		return run, s.cells.all[0], err
	}
	return stayIn(ctx, s.cells, func(ctx context.Context, c *cell) (*reconcile.Run, error) { return c.recon.GetRun(ctx, id) },
		fmt.Errorf("recon run %d: %w", id, ErrNotFound))
}
