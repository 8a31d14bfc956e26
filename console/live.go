package console

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/idemops/idemops/access"
)

// liveTTL is how long one computation of a live region's view serves every page polling it.
// The dashboard polls every 5 s, so an operator never sees figures older than one poll.
const liveTTL = 2 * time.Second

// liveShare shares one computation of a live region's view among the pages that poll it: the
// first poll of a window computes it (concurrent polls wait for that one, singleflight), the
// others of the window reuse it. Fifty open dashboards of one scope then cost the database one
// dashboard's queries per window, not fifty (TestLive_FiftyOpenDashboardsShareOneQueryPerWindow).
// Entries are per region and scope; expired ones are dropped on every store, so the map holds
// at most the scopes polled within one window.
type liveShare struct {
	ttl   time.Duration
	group singleflight.Group

	mu    sync.Mutex
	views map[string]liveView
}

type liveView struct {
	until time.Time
	view  any
}

func newLiveShare(ttl time.Duration) *liveShare {
	return &liveShare{ttl: ttl, views: map[string]liveView{}}
}

// get returns the view stored under key while it is fresh, else computes it once for every
// caller waiting on key; fresh skips the stored view (a page loaded whole always reads the
// database: the share serves polls). The computation runs under its own deadline, detached
// from the first caller's request, so that caller leaving does not fail the others.
func (l *liveShare) get(ctx context.Context, key string, fresh bool, compute func(context.Context) (any, error)) (any, error) {
	if !fresh {
		l.mu.Lock()
		v, ok := l.views[key]
		l.mu.Unlock()
		if ok && time.Now().Before(v.until) {
			return v.view, nil
		}
	}
	v, err, _ := l.group.Do(key, func() (any, error) {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		view, err := compute(cctx)
		if err != nil {
			return nil, err
		}
		now := time.Now()
		l.mu.Lock()
		defer l.mu.Unlock()
		for k, old := range l.views {
			if !now.Before(old.until) {
				delete(l.views, k)
			}
		}
		l.views[key] = liveView{until: now.Add(l.ttl), view: view}
		return view, nil
	})
	return v, err
}

// liveScopeKey names what a live view depends on for op: the region, op's role and tenants.
func liveScopeKey(region string, op *access.Operator) string {
	if op.SeesAllTenants() {
		return fmt.Sprintf("%s|%d|*", region, op.Role)
	}
	tenants := slices.Clone(op.Tenants)
	slices.Sort(tenants)
	return fmt.Sprintf("%s|%d|%s", region, op.Role, strings.Join(tenants, ","))
}
