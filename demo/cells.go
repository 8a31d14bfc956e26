package demo

import (
	"log/slog"
	"slices"
	"sync"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
)

// worldCells is where the world keeps what a tenant owns when it routes by tenant
// (WorldConfig.Stores): each tenant's rows in its own cell's database, each cell's answers
// recorded there. Without Stores every tenant's cell is the default one (db).
type worldCells struct {
	stores func(tenant string) (*claim.Store, error) // nil: one cell
	db     *gorm.DB                                  // the default cell's
	logger *slog.Logger

	mu      sync.Mutex
	answers map[*claim.Store]*claim.AnswerRecorder // one per cell, started on first use
}

// dbOf is the database holding tenant's rows.
func (c *worldCells) dbOf(tenant string) (*gorm.DB, error) {
	if c.stores == nil {
		return c.db, nil
	}
	store, err := c.stores(tenant)
	if err != nil {
		return nil, err
	}
	return store.DB(), nil
}

// dbs are the databases of tenants' cells, the default cell's first, each once; a tenant with no
// cell is left out.
func (c *worldCells) dbs(tenants []string) []*gorm.DB {
	out := []*gorm.DB{c.db}
	for _, t := range tenants {
		if db, err := c.dbOf(t); err == nil && !slices.Contains(out, db) {
			out = append(out, db)
		}
	}
	return out
}

// otherOrders are the order books of tenants' cells other than the default one, as the map
// places them now (a tenant moved since the start included).
func (c *worldCells) otherOrders(tenants []string) []*Orders {
	var out []*Orders
	for _, db := range c.dbs(tenants)[1:] {
		out = append(out, &Orders{DB: db})
	}
	return out
}

// answersOf is a cell's answer recorder (httpidem/grpcidem Config.AnswersOf), on the store's
// database, started the first time the cell answers — a cell a tenant moved to included.
func (c *worldCells) answersOf(store *claim.Store) *claim.AnswerRecorder {
	c.mu.Lock()
	defer c.mu.Unlock()
	a, ok := c.answers[store]
	if !ok {
		a = claim.NewAnswerRecorder(store.DB(), claim.AnswerRecorderConfig{Logger: c.logger})
		a.Start()
		c.answers[store] = a
	}
	return a
}

// stopAnswers flushes and stops every cell's recorder.
func (c *worldCells) stopAnswers() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range c.answers {
		a.Stop()
	}
}

// AnswersDropped counts the answers no cell's recorder kept (buffer full or a failed batch).
func (w *World) AnswersDropped() int64 {
	w.cells.mu.Lock()
	defer w.cells.mu.Unlock()
	var n int64
	for _, a := range w.cells.answers {
		n += a.Dropped()
	}
	return n
}

// tenants are the world's tenants, each once, sorted.
func (w *World) tenants() []string {
	var out []string
	for _, t := range w.APIKeys {
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return out
}
