package console

import (
	"context"
	"errors"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/daemon"
)

// scheduleTenants resolves the tenant set of each named schedule (objectTenants for a list).
func (s *Server) scheduleTenants(ctx context.Context, names []string) (map[string][]string, error) {
	out := make(map[string][]string, len(names))
	for _, n := range names {
		if _, ok := out[n]; ok {
			continue
		}
		ts, err := s.scope.Tenants(ctx, access.ObjSchedule, n)
		if errors.Is(err, ErrNotFound) {
			ts, err = []string{access.EveryTenant}, nil // a recon job deleted since: "*" only
		}
		if err != nil {
			return nil, err
		}
		out[n] = ts
	}
	return out, nil
}

// visibleSchedules lists the schedules op may see (configuration: sharing a tenant suffices).
func (s *Server) visibleSchedules(ctx context.Context, op *access.Operator) ([]daemon.Schedule, error) {
	all, err := daemon.ListSchedules(ctx, s.db)
	if err != nil {
		return nil, err
	}
	return visibleBySchedule(ctx, s, op, all, access.ObjSchedule, func(sc daemon.Schedule) (string, string) { return sc.Name, sc.Name })
}

// visibleJobRuns lists the recent job runs op may see: those of schedules op covers (a run's
// stats count the keys of every tenant of its schedule).
func (s *Server) visibleJobRuns(ctx context.Context, op *access.Operator, f daemon.RunFilter) ([]daemon.Run, error) {
	runs, err := daemon.ListRuns(ctx, s.db, f)
	if err != nil {
		return nil, err
	}
	return visibleBySchedule(ctx, s, op, runs, access.ObjJobRun, func(r daemon.Run) (string, string) { return r.Schedule, "" })
}

// visibleBySchedule keeps the items op may see as objects of kind whose tenants are their
// schedule's; ref gives an item's schedule and its name in refusals.
func visibleBySchedule[T any](ctx context.Context, s *Server, op *access.Operator, items []T, kind access.ObjectKind,
	ref func(T) (schedule, name string)) ([]T, error) {
	names := make([]string, len(items))
	for i, it := range items {
		names[i], _ = ref(it)
	}
	tenants, err := s.scheduleTenants(ctx, names)
	if err != nil {
		return nil, err
	}
	out := items[:0]
	for _, it := range items {
		schedule, name := ref(it)
		if access.Decide(op, kind, name, tenants[schedule], false) == nil {
			out = append(out, it)
		}
	}
	return out, nil
}
