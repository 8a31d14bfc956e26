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
	return visibleBy(ctx, op, all, access.ObjSchedule, s.scheduleTenants, func(sc daemon.Schedule) (string, string) { return sc.Name, sc.Name })
}

// visibleJobRuns lists the recent job runs op may see: those of schedules op covers (a run's
// stats count the keys of every tenant of its schedule).
func (s *Server) visibleJobRuns(ctx context.Context, op *access.Operator, f daemon.RunFilter) ([]daemon.Run, error) {
	runs, err := daemon.ListRuns(ctx, s.db, f)
	if err != nil {
		return nil, err
	}
	return visibleBy(ctx, op, runs, access.ObjJobRun, s.scheduleTenants, func(r daemon.Run) (string, string) { return r.Schedule, "" })
}
