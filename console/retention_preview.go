package console

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/keys"
	"github.com/idemops/idemops/retention"
	"github.com/idemops/idemops/templates"
)

// dryRun counts what a purge would do now; nothing is deleted (a purge_log row records that
// the dry run was asked for).
func (s *Server) dryRun(ctx context.Context, r *request, operation string) (*retention.Report, error) {
	// A dry run counts what the policies (every tenant's) would purge of every tenant's keys.
	if err := s.authorize(ctx, r, "retention.preview", access.ObjPolicy, "purge"); err != nil {
		return nil, err
	}
	operation = strings.TrimSpace(operation)
	if operation != "" {
		if err := retention.ValidOperation("operation", operation); err != nil {
			return nil, err
		}
	}
	return s.dryRunIn(ctx, operation, r.op.Actor())
}

func previewView(rep *retention.Report) templates.PreviewView {
	p := templates.PreviewView{Done: true, Operation: rep.Operation, Deleted: rep.Deleted, Tombstoned: rep.Tombstoned, RunID: rep.RunID,
		Estimated: rep.Sample.Estimated(), SamplePercent: samplePercent(rep.Sample)}
	for _, d := range rep.Due {
		p.Rows = append(p.Rows, templates.DueRow{Phase: d.Phase, Operation: d.Operation, State: string(d.State),
			Day: d.Day.UTC().Format(time.DateOnly), N: d.N})
	}
	return p
}

// samplePercent is the share of the keys table an estimated preview read ("2.5% of ~8000000 keys").
func samplePercent(s keys.DueSample) string {
	if !s.Estimated() {
		return ""
	}
	return strconv.FormatFloat(100*s.Fraction, 'g', 2, 64) + "% / ~" + strconv.FormatInt(s.Rows, 10)
}

// retentionPreview is GET /retention/preview?operation=X: the page with a dry run's counts.
func (s *Server) retentionPreview(c *gin.Context, r *request) error {
	ctx, cancel := context.WithTimeout(c.Request.Context(), s.cfg.PreviewTimeout+s.cfg.QueryTimeout)
	defer cancel()
	ctx, missed := s.leaveOutFailedCells(ctx) // a cell failing over: the others' counts, and its name
	rep, err := s.dryRun(ctx, r, c.Query("operation"))
	if err != nil {
		return err
	}
	v, err := s.retentionView(ctx, r, "")
	if err != nil {
		return err
	}
	v.Preview, v.Unavailable = previewView(rep), missed.list()
	s.render(c, http.StatusOK, templates.RetentionPage(chrome(r, "retention"), v))
	return nil
}

// apiPreview is GET /api/v1/retention/preview?operation=X: a dry run's counts.
func (s *Server) apiPreview(c *gin.Context, r *request) error {
	ctx, cancel := context.WithTimeout(c.Request.Context(), s.cfg.PreviewTimeout+s.cfg.QueryTimeout)
	defer cancel()
	rep, err := s.dryRun(ctx, r, c.Query("operation"))
	if err != nil {
		return err
	}
	due := []gin.H{}
	for _, d := range rep.Due {
		due = append(due, gin.H{"phase": d.Phase, "operation": d.Operation, "state": d.State,
			"day": d.Day.UTC().Format(time.DateOnly), "n": d.N})
	}
	c.JSON(http.StatusOK, gin.H{"run_id": rep.RunID, "operation": rep.Operation, "would_delete": rep.Deleted,
		"would_tombstone": rep.Tombstoned, "due": due, "estimated": rep.Sample.Estimated(), "sample_fraction": rep.Sample.Fraction})
	return nil
}
