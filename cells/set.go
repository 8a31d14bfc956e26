package cells

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/internal/pgpool"
	"github.com/idemops/idemops/migrations"
)

// Options say how Open opens the cells.
type Options struct {
	// Migrate applies pending migrations to every cell before it is used.
	Migrate bool
	// Claim configures each cell's claim.Store (one digest secret for every cell: a key's digest
	// does not change when its tenant moves).
	Claim claim.Config
	// OpenDB opens a cell's pool; default pgpool.Open, the project's one pool opener.
	OpenDB func(url string) (*gorm.DB, error)
	// ConnectTimeout bounds each attempt to reach a cell other than the control cell (default
	// 5 s): one that is refused, reset or times out at Open starts unavailable (see Open).
	ConnectTimeout time.Duration
	// RetryMax caps the wait between attempts to reach a cell unavailable since Open (default
	// 5 s; the first wait is 100 ms, doubling).
	RetryMax time.Duration
	// Logger hears of a cell unavailable at Open, each new reason it stays so, and when it is
	// up (default slog.Default()); never of its URL.
	Logger *slog.Logger
}

// Cell is one open cell: its database and the claim store on it.
type Cell struct {
	Name  string
	ID    int
	URL   string // the map's connection string (may hold a password: never log it)
	DB    *gorm.DB
	Store *claim.Store

	spec CellSpec
	down atomic.Pointer[CellDownError] // nil once the cell was reached and checked
	up   chan struct{}                 // closed then
}

// Err is nil for a cell in use; a *CellDownError while the cell has not been reached and checked
// since the process started (Open): its DB then refuses every connection with this error, and
// Set.For refuses its tenants.
func (c *Cell) Err() error {
	if e := c.down.Load(); e != nil {
		return e
	}
	return nil
}

// Up is closed once the cell is in use: at once for a cell Open reached, later for one that
// was unavailable then.
func (c *Cell) Up() <-chan struct{} { return c.up }

// Set is the open cells of a map. Its methods are safe for concurrent use; Refresh swaps the map
// under readers.
type Set struct {
	opt Options
	log *slog.Logger

	// The attempts to reach the cells unavailable since Open run until Close.
	retries    sync.WaitGroup
	stopRetry  context.CancelFunc
	retryCtx   context.Context
	closeRetry sync.Once

	mu      sync.RWMutex
	m       *Map
	cells   map[string]*Cell
	retired []*Cell // replaced by a Refresh (a changed URL); closed with the set
}

// Open opens every cell of m: one pool each, migrated when opt.Migrate, checked to be the
// database of that cell and no other (cell_identity), its sequences moved into the cell's id
// range. On any failure nothing stays open and the error names the cell — but for a cell other
// than the control cell that cannot be reached (its connection refused, reset or timed out
// within opt.ConnectTimeout): one cell's outage must not keep every other cell's tenants from
// being served by a process that restarts during it. That cell starts unavailable (Cell.Err):
// For refuses its tenants with a *CellDownError, which the edges answer as a failover (503 with
// Retry-After, gRPC Unavailable); its DB and Store exist but connect to nothing. The set tries
// to reach it again, backing off to opt.RetryMax, and runs the same checks (migrations when
// asked, identity, id range) before the first connection for anything else is let through
// (Cell.Up). A cell that answers but fails a check is a misconfiguration, refused as before.
func Open(ctx context.Context, m *Map, opt Options) (*Set, error) {
	if opt.OpenDB == nil {
		opt.OpenDB = pgpool.Open
	}
	opt.ConnectTimeout = cmp.Or(opt.ConnectTimeout, 5*time.Second)
	opt.RetryMax = cmp.Or(opt.RetryMax, 5*time.Second)
	s := &Set{opt: opt, log: cmp.Or(opt.Logger, slog.Default()), m: m, cells: map[string]*Cell{}}
	s.retryCtx, s.stopRetry = context.WithCancel(context.WithoutCancel(ctx))
	for _, spec := range m.Cells() {
		c, err := s.open(ctx, spec)
		if err != nil && spec.Name != m.Control() && unreachable(err) {
			c, err = s.openDown(spec, err)
		}
		if err != nil {
			s.Close()
			return nil, err
		}
		s.cells[spec.Name] = c
	}
	return s, nil
}

// unreachable says whether err, met opening a cell, means it did not answer (rather than
// answered wrongly): the connection refused, reset, cut or timed out.
func unreachable(err error) bool {
	return claim.Unreachable(err) || errors.Is(err, context.DeadlineExceeded)
}

func (s *Set) open(ctx context.Context, spec CellSpec) (*Cell, error) {
	if spec.Name != s.m.Control() {
		if err := s.reach(ctx, spec); err != nil {
			return nil, fmt.Errorf("cell %s: connect: %w", spec.Name, err)
		}
	}
	db, err := s.opt.OpenDB(spec.URL)
	if err != nil {
		return nil, fmt.Errorf("cell %s: connect: %w", spec.Name, err)
	}
	c := &Cell{Name: spec.Name, ID: spec.ID, URL: spec.URL, DB: db, spec: spec, up: make(chan struct{})}
	close(c.up)
	fail := func(err error) (*Cell, error) {
		c.close()
		return nil, fmt.Errorf("cell %s: %w", spec.Name, err)
	}
	if err := s.prepare(ctx, db, spec); err != nil {
		return fail(err)
	}
	if c.Store, err = claim.NewStore(db, s.opt.Claim); err != nil {
		return fail(err)
	}
	return c, nil
}

// reach connects to spec's database once, within opt.ConnectTimeout: whether it answers at all
// (a pool's first ping has no bound of its own against a host that drops packets).
func (s *Set) reach(ctx context.Context, spec CellSpec) error {
	ctx, cancel := context.WithTimeout(ctx, s.opt.ConnectTimeout)
	defer cancel()
	// Parsed as the pool parses it (pgx.ParseConfig): pgx's own settings in the URL, such as
	// default_query_exec_mode for a cell behind pgbouncer, are not sent to the server, which
	// would refuse them as startup parameters ("unsupported startup parameter").
	conn, err := pgx.Connect(ctx, spec.URL)
	if err != nil {
		return err
	}
	return conn.Close(ctx)
}

// prepare makes db ready to be spec's cell: migrated when asked, its identity claimed or
// checked, its sequences in the cell's id range.
func (s *Set) prepare(ctx context.Context, db *gorm.DB, spec CellSpec) error {
	if s.opt.Migrate {
		sqlDB, err := db.DB()
		if err != nil {
			return err
		}
		if err := migrations.Up(ctx, sqlDB); err != nil {
			return err
		}
	}
	if err := claimIdentity(ctx, db, spec); err != nil {
		return err
	}
	return keepIDsInRange(ctx, db, spec)
}

// openDown is spec's cell, unreachable at Open (why): a pool that connects to nothing until
// the cell was reached and prepared, and the store on it; tried again until then.
func (s *Set) openDown(spec CellSpec, why error) (*Cell, error) {
	c := &Cell{Name: spec.Name, ID: spec.ID, URL: spec.URL, spec: spec, up: make(chan struct{})}
	c.down.Store(&CellDownError{Cell: spec.Name, Since: time.Now(), Err: why})
	db, err := pgpool.OpenGated(spec.URL, c.Err)
	if err != nil {
		return nil, fmt.Errorf("cell %s: %w", spec.Name, err)
	}
	c.DB = db
	if c.Store, err = claim.NewStore(db, s.opt.Claim); err != nil {
		c.close()
		return nil, fmt.Errorf("cell %s: %w", spec.Name, err)
	}
	s.log.Warn("cells: a cell cannot be reached; its tenants are answered 503 until it is, every other cell serves", "cell", spec.Name, "err", why)
	s.retries.Add(1)
	go s.retry(c)
	return c, nil
}

// retry tries to reach c until it is reached and prepared (then lets its pool connect) or the
// set is closed, waiting 100 ms at first and doubling up to opt.RetryMax.
func (s *Set) retry(c *Cell) {
	defer s.retries.Done()
	ctx := s.retryCtx
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, s.opt.RetryMax) {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		err := s.check(ctx, c.spec)
		if ctx.Err() != nil {
			return
		}
		was := c.down.Load()
		if err == nil {
			c.down.Store(nil)
			close(c.up)
			s.log.Info("cells: a cell unavailable since start is reached and checked; its tenants are served", "cell", c.Name,
				"down_for", time.Since(was.Since).Round(time.Millisecond))
			return
		}
		c.down.Store(&CellDownError{Cell: c.Name, Since: was.Since, Err: err})
		switch {
		case !unreachable(err):
			s.log.Error("cells: a cell answers but is refused; its tenants stay unavailable", "cell", c.Name, "err", err)
		case !unreachable(was.Err):
			s.log.Warn("cells: a cell cannot be reached again", "cell", c.Name, "err", err)
		}
	}
}

// check reaches spec's database and prepares it (Open's checks) on a pool of its own, closed
// after: nothing of the cell's own pool connects before the checks pass.
func (s *Set) check(ctx context.Context, spec CellSpec) error {
	if err := s.reach(ctx, spec); err != nil {
		return err
	}
	db, err := s.opt.OpenDB(spec.URL)
	if err != nil {
		return err
	}
	defer (&Cell{DB: db}).close()
	return s.prepare(ctx, db, spec)
}

func (c *Cell) close() {
	if sqlDB, err := c.DB.DB(); err == nil {
		sqlDB.Close()
	}
}

// For is tenant's cell; a *NoCellError (errors.Is ErrNoCell) when the map puts it in none, a
// *CellDownError (claim.Unreachable) while its cell has not been reached since start.
func (s *Set) For(tenant string) (*Cell, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	name, ok := s.m.CellOf(tenant)
	if !ok {
		return nil, &NoCellError{Tenant: tenant}
	}
	c := s.cells[name]
	if err := c.Err(); err != nil {
		return nil, err
	}
	return c, nil
}

// StoreFor is tenant's claim store (For's Store), the shape httpidem and grpcidem take.
func (s *Set) StoreFor(tenant string) (*claim.Store, error) {
	c, err := s.For(tenant)
	if err != nil {
		return nil, err
	}
	return c.Store, nil
}

// Control is the cell holding operators, sessions, audit, channel accounts and recon jobs.
func (s *Set) Control() *Cell {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.cells[s.m.Control()]
}

// Cell is the cell named name.
func (s *Set) Cell(name string) (*Cell, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if _, ok := s.m.Cell(name); !ok {
		return nil, false
	}
	return s.cells[name], true
}

// Cells are the open cells in the map's order, those unavailable since start among them (their
// Err says which; their DB connects to nothing until Up).
func (s *Set) Cells() []*Cell {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*Cell, 0, len(s.m.cells))
	for _, spec := range s.m.cells {
		out = append(out, s.cells[spec.Name])
	}
	return out
}

// Stores are the open cells' claim stores by cell name: what grpcidem.HealthConfig.Cells
// reports on, one health status per cell (a cell unavailable since start does not ping).
func (s *Set) Stores() map[string]*claim.Store {
	out := map[string]*claim.Store{}
	for _, c := range s.Cells() {
		out[c.Name] = c.Store
	}
	return out
}

// Map is the map the set routes by now.
func (s *Set) Map() *Map {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.m
}

// Refresh re-reads the map file (after a move switched it) and routes by it from then on. New
// cells are opened as Open opens them; a cell whose URL changed gets a new pool (the old one is
// closed with the set: a request may still hold it). A map that does not load, or names a cell
// that does not open, leaves the set as it was.
func (s *Set) Refresh(ctx context.Context) error {
	s.mu.RLock()
	file := s.m.File
	s.mu.RUnlock()
	if file == "" {
		return errors.New("refresh cells: the map was not read from a file")
	}
	m, err := Load(file)
	if err != nil {
		return err
	}
	return s.Use(ctx, m)
}

// Watch refreshes the set whenever its map file changes (a move's switch rewrites it by an
// atomic rename), looking every `every` until ctx ends, so that a process serving claims routes
// a moved tenant to its new cell within about `every` — its clients meanwhile get the source
// cell's 503 tenant-moving with Retry-After. done, when set, hears each refresh's outcome (nil:
// the set routes by the new map; an error: it routes as before and the next change is tried
// again). A set not read from a file has nothing to watch: Watch returns at once.
func (s *Set) Watch(ctx context.Context, every time.Duration, done func(error)) {
	file := s.Map().File
	if file == "" {
		return
	}
	last, _ := os.Stat(file)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cur, err := os.Stat(file)
		if err != nil || (last != nil && os.SameFile(last, cur) && cur.ModTime().Equal(last.ModTime()) && cur.Size() == last.Size()) {
			continue // unreadable now (mid-rename) or unchanged
		}
		last = cur
		err = s.Refresh(ctx)
		if done != nil {
			done(err)
		}
	}
}

// Use routes by m from now on, opening the cells it adds (see Refresh).
func (s *Set) Use(ctx context.Context, m *Map) error {
	// Refreshes are rare: one at a time, and readers wait only for the swap.
	s.mu.Lock()
	defer s.mu.Unlock()
	opened := map[string]*Cell{}
	for _, spec := range m.Cells() {
		if c, ok := s.cells[spec.Name]; ok && c.URL == spec.URL && c.ID == spec.ID {
			continue
		}
		c, err := s.open(ctx, spec)
		if err != nil {
			for _, c := range opened {
				c.close()
			}
			return err
		}
		opened[spec.Name] = c
	}
	for name, c := range opened {
		if old, ok := s.cells[name]; ok {
			s.retired = append(s.retired, old)
		}
		s.cells[name] = c
	}
	s.m = m
	return nil
}

// Close closes every pool the set opened, and stops reaching for the cells unavailable since
// Open.
func (s *Set) Close() {
	s.closeRetry.Do(func() {
		s.stopRetry()
		s.retries.Wait()
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.cells {
		c.close()
	}
	for _, c := range s.retired {
		c.close()
	}
	s.cells, s.retired = map[string]*Cell{}, nil
}
