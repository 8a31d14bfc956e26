package console

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"gorm.io/gorm"

	"github.com/idemops/idemops/cells"
	"github.com/idemops/idemops/internal/tenantdb"
)

// setCells is an open cells.Set as the console reads it (Cells).
type setCells struct {
	set     *cells.Set
	control *gorm.DB
	log     *slog.Logger

	mu      sync.Mutex
	opened  map[string]opened // the handles opened on cells other than the control cell, by name
	retired []*gorm.DB        // handles of a cell whose URL changed since, closed with the rest
	closed  bool
}

// opened is a tenant handle on one cell's URL.
type opened struct {
	url string
	db  *gorm.DB
}

// CellsOf is the console's view of an open set of tenant cells: a tenant handle (tenantdb.Open)
// on each cell's URL — control, the console's own handle, for the set's control cell — and the
// placement of the set's map as it is now. The set follows its map file when its owner runs
// Set.Watch (`idemops console --cells` does): a tenant move's switch, and cells the map adds,
// which get a handle the first time the console asks for them. Close closes the handles it opened.
func CellsOf(set *cells.Set, control *gorm.DB, log *slog.Logger) (c Cells, close func(), err error) {
	if log == nil {
		log = slog.Default()
	}
	sc := &setCells{set: set, control: control, log: log, opened: map[string]opened{}}
	if _, err := sc.cells(); err != nil {
		sc.close()
		return nil, nil, err
	}
	return sc, sc.close, nil
}

// cells are the set's cells now, opening a handle on any it has not opened yet (or whose URL
// changed: the old handle stays open until close, a request may hold it). A cell whose handle
// does not open is left out, its error returned with the others.
func (sc *setCells) cells() ([]TenantCell, error) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	var out []TenantCell
	var fails []error
	for _, cl := range sc.set.Cells() {
		db := sc.control
		if cl != sc.set.Control() {
			h, ok := sc.opened[cl.Name]
			if !ok || h.url != cl.URL {
				if sc.closed {
					return nil, errors.New("console: the cells' handles are closed")
				}
				// Gated by the set: a cell unavailable since start is not connected to before the
				// set has reached and checked it, and until then its reads fail as a cell's that
				// went down (the pages name it); opened without a ping, so its outage does not
				// keep the console from starting.
				ndb, err := tenantdb.OpenGated(cl.URL, cl.Err)
				if err != nil {
					fails = append(fails, fmt.Errorf("console: cell %s: %w", cl.Name, err))
					continue
				}
				if ok {
					sc.retired = append(sc.retired, h.db)
				}
				h = opened{cl.URL, ndb}
				sc.opened[cl.Name] = h
			}
			db = h.db
		}
		out = append(out, TenantCell{Name: cl.Name, DB: db})
	}
	return out, errors.Join(fails...)
}

func (sc *setCells) close() {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.closed = true
	for _, h := range sc.opened {
		sc.retired = append(sc.retired, h.db)
	}
	for _, db := range sc.retired {
		if sqlDB, err := db.DB(); err == nil {
			sqlDB.Close()
		}
	}
	sc.opened, sc.retired = map[string]opened{}, nil
}

// Cells are the set's cells now (Cells: asked again when the placement names a cell the console
// does not have). A cell whose handle cannot be opened is left out and logged.
func (sc *setCells) Cells() []TenantCell {
	out, err := sc.cells()
	if err != nil {
		sc.log.Error("console: open a cell's handle", "err", err)
	}
	return out
}

func (sc *setCells) Placement() map[string]string {
	out := map[string]string{}
	for _, spec := range sc.set.Map().Cells() {
		for _, t := range spec.Tenants {
			out[t] = spec.Name
		}
	}
	return out
}
