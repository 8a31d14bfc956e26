package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"gorm.io/gorm"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/retention"
	"github.com/idemops/idemops/templates"
)

// Retention: everyone signed in reads the policies, the floor, the dry run and the purge
// history; administrators change policies and the floor and set or lift legal holds. Each
// change is written together with its audit row: the retention functions take a *gorm.DB, so
// they run inside the console's transaction (nested, as a savepoint).

var retentionNotices = map[string]string{
	"saved":   "Policy saved. The next purge re-stamps existing keys under it.",
	"deleted": "Policy deleted.",
	"floor":   "Floor saved.",
}

// purgeHistoryShown is how many purge runs one page of history lists.
const purgeHistoryShown = 20

func retentionStates() []string {
	out := make([]string, len(retention.PolicyStates))
	for i, s := range retention.PolicyStates {
		out[i] = string(s)
	}
	return out
}

func floorForm(f retention.Floor) templates.FloorForm {
	return templates.FloorForm{ClientRetry: retention.FormatPeriod(f.ClientRetry), Backfill: retention.FormatPeriod(f.Backfill),
		ReconciliationLag: retention.FormatPeriod(f.ReconciliationLag)}
}

// retentionView reads the policies, the floor and one page of purge history (before: keyset).
func (s *Server) retentionView(ctx context.Context, r *request, before int64) (templates.RetentionView, error) {
	v := templates.RetentionView{States: retentionStates(), CanEdit: r.op.Role >= access.RoleAdmin,
		Form: templates.PolicyForm{Operation: retention.AllOperations, State: string(claim.StateCompleted)}}
	set, err := retention.ListPolicies(ctx, s.db)
	if err != nil {
		return v, err
	}
	f := set.Floor
	v.Floor = templates.FloorView{Total: retention.FormatPeriod(f.Total()), ClientRetry: retention.FormatPeriod(f.ClientRetry),
		Backfill: retention.FormatPeriod(f.Backfill), ReconciliationLag: retention.FormatPeriod(f.ReconciliationLag),
		UpdatedBy: f.UpdatedBy, UpdatedAt: f.UpdatedAt}
	v.FloorForm = floorForm(f)
	for _, p := range set.Policies {
		v.Policies = append(v.Policies, templates.PolicyRow{Operation: p.Operation, State: string(p.State),
			KeepResponse: retention.FormatPeriod(p.KeepResponse), KeepKey: retention.FormatPeriod(p.KeepKey),
			UpdatedBy: p.UpdatedBy, UpdatedAt: p.UpdatedAt})
	}
	if !r.op.SeesAllTenants() {
		return v, nil // the purge history counts every tenant's keys
	}
	runs, err := retention.PurgeHistory(ctx, s.db, before, purgeHistoryShown+1)
	if err != nil {
		return v, err
	}
	if len(runs) > purgeHistoryShown {
		runs = runs[:purgeHistoryShown]
		v.HistoryNext = "/retention?before=" + strconv.FormatInt(runs[len(runs)-1].ID, 10)
	}
	for _, p := range runs {
		v.History = append(v.History, templates.PurgeRow{ID: p.ID, StartedAt: p.StartedAt, FinishedAt: p.FinishedAt,
			DryRun: p.DryRun, Actor: p.Actor, Operation: p.Operation, Status: p.Status, Deleted: p.Deleted,
			Tombstoned: p.Tombstoned, Restamped: p.Restamped, Timeouts: p.Timeouts, BatchSize: p.BatchSize,
			Error: truncate(p.Error, 200)})
	}
	return v, nil
}

func parseBefore(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, inputErr("before", "is not a page cursor")
	}
	return n, nil
}

// retentionPage is GET /retention.
func (s *Server) retentionPage(c *gin.Context, r *request) error {
	before, err := parseBefore(c.Query("before"))
	if err != nil {
		return err
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	v, err := s.retentionView(ctx, r, before)
	if err != nil {
		return err
	}
	v.Notice = retentionNotices[c.Query("notice")]
	s.render(c, http.StatusOK, templates.RetentionPage(chrome(r, "retention"), v))
	return nil
}

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
	return s.purge.DryRun(ctx, operation, r.op.Actor())
}

func previewView(rep *retention.Report) templates.PreviewView {
	p := templates.PreviewView{Done: true, Operation: rep.Operation, Deleted: rep.Deleted, Tombstoned: rep.Tombstoned, RunID: rep.RunID}
	for _, d := range rep.Due {
		p.Rows = append(p.Rows, templates.DueRow{Phase: d.Phase, Operation: d.Operation, State: string(d.State),
			Day: d.Day.UTC().Format(time.DateOnly), N: d.N})
	}
	return p
}

// retentionPreview is GET /retention/preview?operation=X: the page with a dry run's counts.
func (s *Server) retentionPreview(c *gin.Context, r *request) error {
	ctx, cancel := context.WithTimeout(c.Request.Context(), s.cfg.PreviewTimeout+s.cfg.QueryTimeout)
	defer cancel()
	rep, err := s.dryRun(ctx, r, c.Query("operation"))
	if err != nil {
		return err
	}
	v, err := s.retentionView(ctx, r, 0)
	if err != nil {
		return err
	}
	v.Preview = previewView(rep)
	s.render(c, http.StatusOK, templates.RetentionPage(chrome(r, "retention"), v))
	return nil
}

// policyInput reads a policy from form or JSON values; a period that does not parse is an
// input error naming its field.
func policyInput(operation, state, keepResponse, keepKey string) (retention.Policy, error) {
	p := retention.Policy{Operation: strings.TrimSpace(operation), State: claim.State(strings.TrimSpace(state))}
	var err error
	if p.KeepResponse, err = retention.ParsePeriod(keepResponse); err != nil {
		return p, inputErr("keep_response", "%s", err.Error())
	}
	if p.KeepKey, err = retention.ParsePeriod(keepKey); err != nil {
		return p, inputErr("keep_key", "%s", err.Error())
	}
	return p, nil
}

// shorterError stops the save of a policy below the default periods until the page's
// confirmation box is ticked; text names the consequence.
type shorterError struct{ why errs.Phrase }

func (e *shorterError) Error() string { return e.why.String() }

// savePolicy saves p (checked against the floor) with its audit row. From the page, a policy below
// the default periods needs confirmed (the API takes the periods as given).
func (s *Server) savePolicy(ctx context.Context, r *request, p retention.Policy, confirmed bool) error {
	// A policy applies to every tenant's keys: only an administrator of every tenant changes it.
	if err := s.authorize(ctx, r, "retention.policy.save", access.ObjPolicy, p.Operation+"/"+string(p.State)); err != nil {
		return err
	}
	return s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := retention.SavePolicy(ctx, tx, p, r.op.Actor()); err != nil {
			return err
		}
		if why := s.shorterThanDefault(p); why.Format != "" && !confirmed {
			return &shorterError{why}
		}
		return s.audit.Append(ctx, tx, audit.Entry{Actor: r.op.Actor(), IP: r.ip, Action: "retention.policy.save",
			Target: "policy:" + p.Operation + "/" + string(p.State),
			Detail: map[string]any{"keep_response": retention.FormatPeriod(p.KeepResponse), "keep_key": retention.FormatPeriod(p.KeepKey)}})
	})
}

// isFormError is an error the form shows next to its fields (400) rather than an error page.
func isFormError(err error) bool { return statusOf(err) == http.StatusBadRequest }

// savePolicyPage is POST /retention/policies (administrators). Bad input re-renders the page
// with the form as sent and the reason (field and floor); nothing is saved then.
func (s *Server) savePolicyPage(c *gin.Context, r *request) error {
	form := templates.PolicyForm{Operation: c.PostForm("operation"), State: c.PostForm("state"),
		KeepResponse: c.PostForm("keep_response"), KeepKey: c.PostForm("keep_key")}
	ctx, cancel := s.ctx(c)
	defer cancel()
	p, err := policyInput(form.Operation, form.State, form.KeepResponse, form.KeepKey)
	if err == nil {
		err = s.savePolicy(ctx, r, p, c.PostForm("confirm_shorter") == "yes")
	}
	if shorter := (*shorterError)(nil); errors.As(err, &shorter) {
		form.Shorter = templates.Say(c.Request.Context(), shorter.why)
		return s.retentionAgain(ctx, c, r, http.StatusOK, func(v *templates.RetentionView) { v.Form = form })
	}
	if err != nil {
		if !isFormError(err) {
			return err
		}
		form.Error = pageMessage(c.Request.Context(), err)
		return s.retentionAgain(ctx, c, r, http.StatusBadRequest, func(v *templates.RetentionView) { v.Form = form })
	}
	c.Redirect(http.StatusSeeOther, "/retention?notice=saved")
	return nil
}

// retentionAgain shows the retention page again with a form as the operator filled it (an error
// to fix, or a consequence to confirm).
func (s *Server) retentionAgain(ctx context.Context, c *gin.Context, r *request, status int, fill func(*templates.RetentionView)) error {
	v, err := s.retentionView(ctx, r, 0)
	if err != nil {
		return err
	}
	fill(&v)
	s.render(c, status, templates.RetentionPage(chrome(r, "retention"), v))
	return nil
}

// shorterThanDefault says what a policy below the deployment's default periods does, or the zero
// Phrase when it keeps responses and keys at least as long as the default.
func (s *Server) shorterThanDefault(p retention.Policy) errs.Phrase {
	def := s.claims.Config()
	if p.KeepResponse >= def.KeepResponse && p.KeepKey >= def.KeepKey {
		return errs.Phrase{}
	}
	return errs.Phrasef("This is shorter than the default (responses %s, keys %s): keys of %s that end %s lose their stored response after %s "+
		"(a retry then gets 410 instead of the replay) and are deleted after %s (a retry then executes again). Tick the box to save it.",
		retention.FormatPeriod(def.KeepResponse), retention.FormatPeriod(def.KeepKey), p.Operation, p.State,
		retention.FormatPeriod(p.KeepResponse), retention.FormatPeriod(p.KeepKey))
}

func (s *Server) deletePolicy(ctx context.Context, r *request, operation string, state claim.State) error {
	if err := s.authorize(ctx, r, "retention.policy.delete", access.ObjPolicy, operation+"/"+string(state)); err != nil {
		return err
	}
	return s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := retention.DeletePolicy(ctx, tx, operation, state, r.op.Actor()); err != nil {
			return err
		}
		return s.audit.Append(ctx, tx, audit.Entry{Actor: r.op.Actor(), IP: r.ip, Action: "retention.policy.delete",
			Target: "policy:" + operation + "/" + string(state)})
	})
}

// deletePolicyPage is POST /retention/policies/delete (administrators).
func (s *Server) deletePolicyPage(c *gin.Context, r *request) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	if err := s.deletePolicy(ctx, r, c.PostForm("operation"), claim.State(c.PostForm("state"))); err != nil {
		return err
	}
	c.Redirect(http.StatusSeeOther, "/retention?notice=deleted")
	return nil
}

func floorInput(ff templates.FloorForm) (retention.Floor, error) {
	var f retention.Floor
	var err error
	if f.ClientRetry, err = retention.ParsePeriod(ff.ClientRetry); err != nil {
		return f, inputErr("client_retry", "%s", err.Error())
	}
	if f.Backfill, err = retention.ParsePeriod(ff.Backfill); err != nil {
		return f, inputErr("backfill", "%s", err.Error())
	}
	if f.ReconciliationLag, err = retention.ParsePeriod(ff.ReconciliationLag); err != nil {
		return f, inputErr("reconciliation_lag", "%s", err.Error())
	}
	return f, nil
}

// setFloorPage is POST /retention/floor (administrators).
func (s *Server) setFloorPage(c *gin.Context, r *request) error {
	ff := templates.FloorForm{ClientRetry: c.PostForm("client_retry"), Backfill: c.PostForm("backfill"),
		ReconciliationLag: c.PostForm("reconciliation_lag")}
	ctx, cancel := s.ctx(c)
	defer cancel()
	if err := s.authorize(ctx, r, "retention.floor.set", access.ObjPolicy, "floor"); err != nil {
		return err
	}
	f, err := floorInput(ff)
	if err == nil {
		err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			if err := retention.SetFloor(ctx, tx, f, r.op.Actor()); err != nil {
				return err
			}
			return s.audit.Append(ctx, tx, audit.Entry{Actor: r.op.Actor(), IP: r.ip, Action: "retention.floor.set", Target: "floor",
				Detail: map[string]any{"client_retry": retention.FormatPeriod(f.ClientRetry), "backfill": retention.FormatPeriod(f.Backfill),
					"reconciliation_lag": retention.FormatPeriod(f.ReconciliationLag)}})
		})
	}
	if err != nil {
		if !isFormError(err) {
			return err
		}
		ff.Error = pageMessage(c.Request.Context(), err)
		return s.retentionAgain(ctx, c, r, http.StatusBadRequest, func(v *templates.RetentionView) { v.FloorForm = ff })
	}
	c.Redirect(http.StatusSeeOther, "/retention?notice=floor")
	return nil
}

// setHold puts a key on legal hold or lifts it, after checking op may see the key's tenant,
// with the audit row in the same transaction.
func (s *Server) setHold(ctx context.Context, r *request, id int64, hold bool, reason string) (bool, error) {
	k, err := s.getKey(ctx, r.op, id)
	if err != nil {
		return false, err
	}
	action := "key.legal_hold.lift"
	if hold {
		action = "key.legal_hold.set"
	}
	var changed bool
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var err error
		if changed, err = retention.SetLegalHold(ctx, tx, k.ID, hold, r.op.Actor(), reason); err != nil {
			return err
		}
		return s.audit.Append(ctx, tx, audit.Entry{Actor: r.op.Actor(), IP: r.ip, Action: action, Target: fmt.Sprintf("key:%d", k.ID),
			Tenant: k.Tenant, Detail: map[string]any{"digest": k.KeyDigest, "reason": truncate(strings.TrimSpace(reason), 500), "changed": changed}})
	})
	return changed, err
}

// holdPage is POST /keys/{id}/hold (administrators): hold=1 sets, hold=0 lifts.
func (s *Server) holdPage(c *gin.Context, r *request) error {
	id, err := parseID(c.Param("id"))
	if err != nil {
		return err
	}
	var hold bool
	switch c.PostForm("hold") {
	case "1":
		hold = true
	case "0":
	default:
		return inputErr("hold", "must be 1 (set) or 0 (lift)")
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	if _, err := s.setHold(ctx, r, id, hold, c.PostForm("reason")); err != nil {
		return err
	}
	c.Redirect(http.StatusSeeOther, fmt.Sprintf("/keys/%d", id))
	return nil
}

// API.

type apiPolicy struct {
	Operation    string    `json:"operation"`
	State        string    `json:"state"`
	KeepResponse string    `json:"keep_response"`
	KeepKey      string    `json:"keep_key"`
	UpdatedBy    string    `json:"updated_by,omitempty"`
	UpdatedAt    time.Time `json:"updated_at,omitzero"`
}

// apiPolicies is GET /api/v1/retention/policies: the floor (and its parts) and every policy.
func (s *Server) apiPolicies(c *gin.Context, r *request) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	set, err := retention.ListPolicies(ctx, s.db)
	if err != nil {
		return err
	}
	f := set.Floor
	ps := []apiPolicy{}
	for _, p := range set.Policies {
		ps = append(ps, apiPolicy{Operation: p.Operation, State: string(p.State), KeepResponse: retention.FormatPeriod(p.KeepResponse),
			KeepKey: retention.FormatPeriod(p.KeepKey), UpdatedBy: p.UpdatedBy, UpdatedAt: p.UpdatedAt})
	}
	c.JSON(http.StatusOK, gin.H{"floor": gin.H{"total": retention.FormatPeriod(f.Total()),
		"client_retry": retention.FormatPeriod(f.ClientRetry), "backfill": retention.FormatPeriod(f.Backfill),
		"reconciliation_lag": retention.FormatPeriod(f.ReconciliationLag)}, "policies": ps})
	return nil
}

// apiSavePolicy is POST /api/v1/retention/policies {"operation","state","keep_response","keep_key"}
// (administrators); periods as "72h" or "30d".
func (s *Server) apiSavePolicy(c *gin.Context, r *request) error {
	var b apiPolicy
	if err := bindJSON(c, &b); err != nil {
		return err
	}
	p, err := policyInput(b.Operation, b.State, b.KeepResponse, b.KeepKey)
	if err != nil {
		return err
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	if err := s.savePolicy(ctx, r, p, true); err != nil {
		return err
	}
	c.JSON(http.StatusOK, apiPolicy{Operation: p.Operation, State: string(p.State),
		KeepResponse: retention.FormatPeriod(p.KeepResponse), KeepKey: retention.FormatPeriod(p.KeepKey)})
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
		"would_tombstone": rep.Tombstoned, "due": due})
	return nil
}

// apiPurges is GET /api/v1/retention/purges?before=ID&limit=N: purge history, newest first.
func (s *Server) apiPurges(c *gin.Context, r *request) error {
	before, err := parseBefore(c.Query("before"))
	if err != nil {
		return err
	}
	limit := 50
	if l := c.Query("limit"); l != "" {
		if limit, err = strconv.Atoi(l); err != nil || limit < 1 || limit > retention.MaxHistory {
			return inputErr("limit", "must be between 1 and %d", retention.MaxHistory)
		}
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	if err := s.authorize(ctx, r, "retention.purges", access.ObjPolicy, "purge"); err != nil {
		return err
	}
	runs, err := retention.PurgeHistory(ctx, s.db, before, limit)
	if err != nil {
		return err
	}
	out := gin.H{"purges": runs, "next_before": nil}
	if runs == nil {
		out["purges"] = []retention.PurgeRun{}
	}
	if len(runs) == limit {
		out["next_before"] = runs[len(runs)-1].ID
	}
	c.JSON(http.StatusOK, out)
	return nil
}
