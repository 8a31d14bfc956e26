package console

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/cells"
	"github.com/idemops/idemops/internal/tenantdb"
)

// mapRefresh is how often the console re-reads the cell map's file at most: a tenant move
// switches the file, and the console then reads the tenant's keys in its new cell.
const mapRefresh = 5 * time.Second

// setCells is an open cells.Set as the console reads it (Cells).
type setCells struct {
	set   *cells.Set
	cells []TenantCell
	log   *slog.Logger

	mu   sync.Mutex
	read time.Time // when the map was last re-read
}

// CellsOf is the console's view of an open set of tenant cells: a tenant handle (tenantdb.Open)
// on each cell's URL — control, the console's own handle, for the set's control cell — and the
// placement of the set's map, re-read from its file at most every few seconds so that a tenant
// move's switch reaches the console. Close closes the handles it opened.
func CellsOf(set *cells.Set, control *gorm.DB, log *slog.Logger) (c Cells, close func(), err error) {
	if log == nil {
		log = slog.Default()
	}
	sc := &setCells{set: set, log: log, read: time.Now()}
	var opened []*gorm.DB
	close = func() {
		for _, db := range opened {
			if sqlDB, err := db.DB(); err == nil {
				sqlDB.Close()
			}
		}
	}
	for _, cl := range set.Cells() {
		db := control
		if cl != set.Control() {
			if db, err = tenantdb.Open(cl.URL); err != nil {
				close()
				return nil, nil, fmt.Errorf("console: cell %s: %w", cl.Name, err)
			}
			opened = append(opened, db)
		}
		sc.cells = append(sc.cells, TenantCell{Name: cl.Name, DB: db})
	}
	return sc, close, nil
}

func (sc *setCells) Cells() []TenantCell { return sc.cells }

func (sc *setCells) Placement() map[string]string {
	sc.mu.Lock()
	if sc.set.Map().File != "" && time.Since(sc.read) >= mapRefresh {
		sc.read = time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := sc.set.Refresh(ctx); err != nil {
			sc.log.Error("re-read the cell map", "err", err) // the map read before stays in use
		}
		cancel()
	}
	sc.mu.Unlock()
	out := map[string]string{}
	for _, spec := range sc.set.Map().Cells() {
		for _, t := range spec.Tenants {
			out[t] = spec.Name
		}
	}
	return out
}
