package cells

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

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
}

// Cell is one open cell: its database and the claim store on it.
type Cell struct {
	Name  string
	ID    int
	URL   string // the map's connection string (may hold a password: never log it)
	DB    *gorm.DB
	Store *claim.Store
}

// Set is the open cells of a map. Its methods are safe for concurrent use; Refresh swaps the map
// under readers.
type Set struct {
	opt Options

	mu      sync.RWMutex
	m       *Map
	cells   map[string]*Cell
	retired []*Cell // replaced by a Refresh (a changed URL); closed with the set
}

// Open opens every cell of m: one pool each, migrated when opt.Migrate, checked to be the
// database of that cell and no other (cell_identity), its sequences moved into the cell's id
// range. On any failure nothing stays open and the error names the cell.
func Open(ctx context.Context, m *Map, opt Options) (*Set, error) {
	if opt.OpenDB == nil {
		opt.OpenDB = pgpool.Open
	}
	s := &Set{opt: opt, m: m, cells: map[string]*Cell{}}
	for _, spec := range m.Cells() {
		c, err := s.open(ctx, spec)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.cells[spec.Name] = c
	}
	return s, nil
}

func (s *Set) open(ctx context.Context, spec CellSpec) (*Cell, error) {
	db, err := s.opt.OpenDB(spec.URL)
	if err != nil {
		return nil, fmt.Errorf("cell %s: connect: %w", spec.Name, err)
	}
	c := &Cell{Name: spec.Name, ID: spec.ID, URL: spec.URL, DB: db}
	fail := func(err error) (*Cell, error) {
		c.close()
		return nil, fmt.Errorf("cell %s: %w", spec.Name, err)
	}
	if s.opt.Migrate {
		sqlDB, err := db.DB()
		if err != nil {
			return fail(err)
		}
		if err := migrations.Up(ctx, sqlDB); err != nil {
			return fail(err)
		}
	}
	if err := claimIdentity(ctx, db, spec); err != nil {
		return fail(err)
	}
	if err := keepIDsInRange(ctx, db, spec); err != nil {
		return fail(err)
	}
	if c.Store, err = claim.NewStore(db, s.opt.Claim); err != nil {
		return fail(err)
	}
	return c, nil
}

func (c *Cell) close() {
	if sqlDB, err := c.DB.DB(); err == nil {
		sqlDB.Close()
	}
}

// For is tenant's cell; a *NoCellError (errors.Is ErrNoCell) when the map puts it in none.
func (s *Set) For(tenant string) (*Cell, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	name, ok := s.m.CellOf(tenant)
	if !ok {
		return nil, &NoCellError{Tenant: tenant}
	}
	return s.cells[name], nil
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

// Cells are the open cells in the map's order.
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
// reports on, one health status per cell.
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

// Close closes every pool the set opened.
func (s *Set) Close() {
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
