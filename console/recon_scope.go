package console

import (
	"context"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/reconcile"
)

// The lists of recon jobs and runs show only what the operator's scope allows (scope.go): an
// item's tenants are its channel account's (issue 14 item 2).

// visibleJobs returns the recon jobs op may see: those whose channel account shares a tenant
// with op (a "*"-only account's: everyone's, as configuration).
func (s *Server) visibleJobs(ctx context.Context, op *access.Operator) ([]reconcile.ReconJob, error) {
	jobs, err := s.recon.ListJobs(ctx)
	if err != nil {
		return nil, err
	}
	return visibleBy(ctx, op, jobs, access.ObjReconJob, s.channelTenants, func(j reconcile.ReconJob) (string, string) { return j.Channel, j.Name })
}

// visibleRuns keeps the runs whose channel account op covers (their counts are its tenants').
func (s *Server) visibleRuns(ctx context.Context, op *access.Operator, runs []reconcile.Run) ([]reconcile.Run, error) {
	return visibleBy(ctx, op, runs, access.ObjReconRun, s.channelTenants, func(r reconcile.Run) (string, string) { return r.Channel, "" })
}

// channelTenants resolves the tenant set of each named channel account.
func (s *Server) channelTenants(ctx context.Context, channels []string) (map[string][]string, error) {
	return reconcile.ChannelTenants(ctx, s.db, channels)
}
