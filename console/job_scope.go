package console

import (
	"cmp"
	"context"
	"errors"
	"slices"

	"gorm.io/gorm"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/templates"
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
	return s.visibleSchedulesOf(ctx, op, s.db)
}

// visibleSchedulesOf lists the schedules op may see in db (one cell's daemon's).
func (s *Server) visibleSchedulesOf(ctx context.Context, op *access.Operator, db *gorm.DB) ([]daemon.Schedule, error) {
	all, err := daemon.ListSchedules(ctx, db)
	if err != nil {
		return nil, err
	}
	return visibleBy(ctx, op, all, access.ObjSchedule, s.scheduleTenants, func(sc daemon.Schedule) (string, string) { return sc.Name, sc.Name })
}

// cellSchedule is a schedule with the cell whose daemon runs it ("" with one database).
type cellSchedule struct {
	daemon.Schedule
	Cell string `json:"cell,omitempty"`
}

// visibleSchedulesIn is visibleSchedules over every cell's daemon, each cell's in its own order,
// each naming its cell. With one database: visibleSchedules.
func (s *Server) visibleSchedulesIn(ctx context.Context, op *access.Operator) ([]cellSchedule, error) {
	if s.cells.cells == nil {
		all, err := s.visibleSchedules(ctx, op)
		var out []cellSchedule // none: nil, as the API always said (null)
		for _, sc := range all {
			out = append(out, cellSchedule{Schedule: sc})
		}
		return out, err
	}
	got, err := eachCell(ctx, s.cells.everywhere(), func(ctx context.Context, c scopedCell) ([]cellSchedule, error) {
		all, err := s.visibleSchedulesOf(ctx, op, c.db)
		out := make([]cellSchedule, len(all))
		for i, sc := range all {
			out[i] = cellSchedule{sc, c.name}
		}
		return out, err
	})
	return slices.Concat(got...), err
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

// cellDaemons is each cell's daemon as op may see it (nil with one cell): its leader, its
// replicas, its schedules op may see with how many last failed, and its runs running now. Each
// cell runs its own leader and jobs; the control cell's are also the rest of the jobs page.
func (s *Server) cellDaemons(ctx context.Context, op *access.Operator) ([]templates.CellDaemonRow, error) {
	if s.cells.cells == nil {
		return nil, nil
	}
	in := s.cells.everywhere()
	rows, err := eachCell(ctx, in, func(ctx context.Context, c scopedCell) (templates.CellDaemonRow, error) {
		row := templates.CellDaemonRow{Name: c.name, Control: c.db == s.db}
		installed, err := daemon.Installed(ctx, c.db)
		if err != nil || !installed {
			return row, err
		}
		leader, err := daemon.Leader(ctx, c.db)
		if err != nil {
			return row, err
		}
		row.Leader, row.HasLeader = leaderRow(leader)
		replicas, err := daemon.Replicas(ctx, c.db)
		if err != nil {
			return row, err
		}
		row.Replicas = len(replicas)
		for _, rp := range replicas {
			row.ReplicaList = append(row.ReplicaList, replicaRow(rp))
		}
		if row.Schedules, row.Failed, err = s.schedulesIn(ctx, op, c.db); err != nil {
			return row, err
		}
		running, err := daemon.ListRuns(ctx, c.db, daemon.RunFilter{Status: daemon.RunRunning, Limit: 100})
		if err != nil {
			return row, err
		}
		running, err = visibleBy(ctx, op, running, access.ObjJobRun, s.scheduleTenants, func(r daemon.Run) (string, string) { return r.Schedule, "" })
		row.Running = len(running)
		return row, err
	})
	// A cell left out (leaveOutFailedCells) answered the zero row: its name alone, marked down.
	for i := range rows {
		if rows[i].Name == "" {
			rows[i] = templates.CellDaemonRow{Name: in[i].name, Control: in[i].db == s.db, Down: true}
		}
	}
	return rows, err
}

// replicaRow is rp as the jobs page shows it.
func replicaRow(rp daemon.Replica) templates.ReplicaRow {
	return templates.ReplicaRow{ID: rp.ID, Name: rp.Name, Host: rp.Host, PID: rp.PID,
		StartedAt: rp.StartedAt, LastSeen: rp.LastSeen, IsLeader: rp.IsLeader}
}

// controlName is the name of the cell whose database is the control database ("" with one cell).
func (s *Server) controlName() string {
	for _, c := range s.cells.everywhere() {
		if c.db == s.db {
			return c.name
		}
	}
	return ""
}

// schedulesIn counts the schedules op may see in db (one cell's) and those whose last run failed
// or timed out.
func (s *Server) schedulesIn(ctx context.Context, op *access.Operator, db *gorm.DB) (n, failed int, err error) {
	schedules, err := s.visibleSchedulesOf(ctx, op, db)
	for _, sc := range schedules {
		if sc.LastRun != nil && (sc.LastRun.Status == daemon.RunFailed || sc.LastRun.Status == daemon.RunTimedOut) {
			failed++
		}
	}
	return len(schedules), failed, err
}

// failedSchedulesIn is every cell's count of op's schedules whose last run failed (the
// dashboard's failed jobs across cells).
func (s *Server) failedSchedulesIn(ctx context.Context, op *access.Operator) (int64, error) {
	got, err := eachCell(ctx, s.cells.everywhere(), func(ctx context.Context, c scopedCell) (int, error) {
		_, failed, err := s.schedulesIn(ctx, op, c.db)
		return failed, err
	})
	var n int64
	for _, f := range got {
		n += int64(f)
	}
	return n, err
}

// visibleJobRunsIn is visibleJobRuns over every cell's daemon, newest first (f.Limit of them),
// with the name of each run's cell ("" with one database).
func (s *Server) visibleJobRunsIn(ctx context.Context, op *access.Operator, f daemon.RunFilter) ([]daemon.Run, []string, error) {
	if s.cells.cells == nil {
		runs, err := s.visibleJobRuns(ctx, op, f)
		return runs, make([]string, len(runs)), err
	}
	in := s.cells.everywhere()
	got, err := eachCell(ctx, in, func(ctx context.Context, c scopedCell) ([]daemon.Run, error) {
		runs, err := daemon.ListRuns(ctx, c.db, f)
		if err != nil {
			return nil, err
		}
		return visibleBy(ctx, op, runs, access.ObjJobRun, s.scheduleTenants, func(r daemon.Run) (string, string) { return r.Schedule, "" })
	})
	if err != nil {
		return nil, nil, err
	}
	all := flatten(got)
	slices.SortStableFunc(all, func(a, b fromCell[daemon.Run]) int {
		return cmp.Or(b.v.StartedAt.Compare(a.v.StartedAt), cmp.Compare(b.v.ID, a.v.ID))
	})
	all = all[:min(len(all), max(f.Limit, 1))]
	runs, cells := make([]daemon.Run, len(all)), make([]string, len(all))
	for i, cr := range all {
		runs[i], cells[i] = cr.v, in[cr.cell].name
	}
	return runs, cells, nil
}

// leaderRow is a daemon's leader as the pages show it; false when it never had one.
func leaderRow(l *daemon.LeaderInfo) (templates.LeaderRow, bool) {
	if l == nil {
		return templates.LeaderRow{}, false
	}
	return templates.LeaderRow{ID: l.LeaderID, Term: l.Term, ElectedAt: l.ElectedAt, ExpiresAt: l.ExpiresAt, Expired: l.Expired}, true
}
