package console

import (
	"time"
)

// Reconciliation: everyone signed in reads jobs, runs and findings; operators run a job now,
// upload a statement and resolve, ignore or recover findings; administrators create, edit,
// enable and disable jobs. The reconciler mirrors a job into the daemon's schedules itself;
// "run now" asks the daemon to run that schedule at its next poll, exactly like the jobs page.
// Job changes are audited right after the reconciler's own transaction, with their outcome;
// finding resolutions are audited by the reconciler through reconAuditor.

var reconNotices = map[string]string{
	"created":  "Recon job created; the daemon runs it on its schedule.",
	"updated":  "Recon job saved.",
	"enabled":  "Recon job enabled.",
	"disabled": "Recon job disabled: its schedule is paused.",
	"run":      "Run requested: the daemon's leader starts it at its next poll.",
	"channel":  "Channel account's tenants saved.",
}

var findingNotices = map[string]string{
	"resolved":  "Finding resolved.",
	"ignored":   "Finding ignored.",
	"recovered": "Recover done: the key was completed from the channel's document and the finding resolved.",
}

const (
	reconRunsShown     = 30
	findingsShown      = 50
	nextRunsShown      = 5
	uploadTimeout      = 15 * time.Minute
	reconStatementFile = "statement"
)

func (s *Server) reconActor(r *request) string { return r.op.Name }
