package console

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"

	"github.com/gin-gonic/gin"
	"gorm.io/gorm"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/reconcile"
	"github.com/idemops/idemops/templates"
)

// Channel accounts and their tenants (issue 14 item 2): lists of recon jobs and runs show only
// what the operator's scope allows (scope.go), and administrators of every tenant of a channel
// account set its tenants.

// visibleJobs returns the recon jobs op may see: those whose channel account shares a tenant
// with op (a "*"-only account's: everyone's, as configuration).
func (s *Server) visibleJobs(ctx context.Context, op *access.Operator) ([]reconcile.ReconJob, error) {
	jobs, err := s.recon.ListJobs(ctx)
	if err != nil {
		return nil, err
	}
	chans := make([]string, len(jobs))
	for i, j := range jobs {
		chans[i] = j.Channel
	}
	tenants, err := reconcile.ChannelTenants(ctx, s.db, chans)
	if err != nil {
		return nil, err
	}
	out := jobs[:0]
	for _, j := range jobs {
		if access.Decide(op, access.ObjReconJob, j.Name, tenants[j.Channel], false) == nil {
			out = append(out, j)
		}
	}
	return out, nil
}

// visibleRuns keeps the runs whose channel account op covers (their counts are its tenants').
func (s *Server) visibleRuns(ctx context.Context, op *access.Operator, runs []reconcile.Run) ([]reconcile.Run, error) {
	chans := make([]string, len(runs))
	for i, r := range runs {
		chans[i] = r.Channel
	}
	tenants, err := reconcile.ChannelTenants(ctx, s.db, chans)
	if err != nil {
		return nil, err
	}
	out := runs[:0]
	for _, r := range runs {
		if access.Decide(op, access.ObjReconRun, "", tenants[r.Channel], false) == nil {
			out = append(out, r)
		}
	}
	return out, nil
}

// channelRows lists the channel accounts r's operator covers.
func (s *Server) channelRows(ctx context.Context, r *request) (templates.ChannelAccountsView, error) {
	v := templates.ChannelAccountsView{CanSet: r.op.Role >= access.RoleAdmin && r.op.SeesAllTenants(), Kinds: reconcile.AccountKinds}
	accounts, err := s.recon.ListChannelAccounts(ctx)
	if err != nil {
		return v, err
	}
	for _, a := range accounts {
		// Only accounts op covers: their tenant lists name no tenant op may not see.
		if !access.Covers(r.op.Tenants, a.Tenants) {
			continue
		}
		row := templates.ChannelAccountRow{Channel: a.Channel, Tenants: strings.Join(a.Tenants, ","),
			Href: "/reconcile/channels/" + url.PathEscape(a.Channel), By: a.UpdatedBy, Kind: a.Kind,
			Takes: reconcile.KindCredentials(a.Kind)}
		if v.CanSet && a.Kind != reconcile.KindGeneric {
			full, err := s.recon.ChannelAccount(ctx, a.Channel)
			if err != nil {
				return v, err
			}
			settings, _ := json.MarshalIndent(full.Settings, "", "  ")
			row.Settings = string(settings)
			for _, c := range full.Credentials {
				what := c.Name + " " + c.Digest
				if c.Label != "" {
					what += " (" + c.Label + ")"
				}
				if c.File != "" {
					what += " file " + c.File
				}
				row.Credentials = append(row.Credentials, what)
			}
		}
		v.Rows = append(v.Rows, row)
	}
	return v, nil
}

// setChannelTenants sets a channel account's tenants, with its audit row in the same
// transaction. The acting administrator must cover the account's present tenants (authorize)
// and every tenant it grants.
func (s *Server) setChannelTenants(ctx context.Context, r *request, channel, tenantList string) ([]string, error) {
	const action = "reconcile.channel.set_tenants"
	channel = strings.TrimSpace(channel)
	if channel == "" || len(channel) > 64 {
		return nil, inputErr("channel", "name the channel account (1–64 characters)")
	}
	if err := s.authorize(ctx, r, action, access.ObjChannel, channel); err != nil {
		return nil, err
	}
	tenants, err := reconcile.NormalizeTenants(strings.Split(tenantList, ","))
	if err != nil {
		return nil, inputErr("tenants", "%s", strings.TrimPrefix(strings.TrimSuffix(err.Error(), ": invalid"), "tenants: "))
	}
	if err := grantable(r.op, tenants); err != nil {
		s.auditRefusal(ctx, r, action, "channel:"+channel, err)
		return nil, err
	}
	old, err := s.scope.ChannelTenants(ctx, channel)
	if err != nil {
		return nil, err
	}
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if tenants, err = reconcile.SetChannelTenants(ctx, tx, channel, tenants, r.op.Actor()); err != nil {
			return err
		}
		return s.audit.Append(ctx, tx, audit.Entry{Actor: r.op.Actor(), IP: r.ip, Action: action, Target: "channel:" + channel,
			Tenants: append(append([]string{}, old...), tenants...),
			Detail:  map[string]any{"tenants": tenants, "before": old}})
	})
	return tenants, err
}

// setChannelPage is POST /reconcile/channels (channel, tenants) and POST
// /reconcile/channels/{name} (tenants): administrators of every tenant of the account.
func (s *Server) setChannelPage(c *gin.Context, r *request) error {
	channel := c.Param("name")
	if channel == "" {
		channel = c.PostForm("channel")
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	if _, err := s.setChannelTenants(ctx, r, channel, c.PostForm("tenants")); err != nil {
		if !isFormError(err) {
			return err
		}
		v, verr := s.reconView(ctx, r)
		if verr != nil {
			return verr
		}
		v.Channels.Error = pageMessage(c.Request.Context(), err)
		s.render(c, http.StatusBadRequest, templates.ReconPage(chrome(r, "reconcile"), v))
		return nil
	}
	c.Redirect(http.StatusSeeOther, "/reconcile?notice=channel#channel-accounts")
	return nil
}

// auditTenantsOf is the tenant set of kind:ref for its audit row ("*" when it cannot be
// resolved: only administrators of every tenant read such a row).
func (s *Server) auditTenantsOf(ctx context.Context, kind access.ObjectKind, ref string) []string {
	ts, err := s.scope.Tenants(ctx, kind, ref)
	if err != nil {
		return []string{access.AllTenants}
	}
	return ts
}

// channelAuditTenants is auditTenantsOf a channel account.
func (s *Server) channelAuditTenants(ctx context.Context, channel string) []string {
	return s.auditTenantsOf(ctx, access.ObjChannel, channel)
}
