package console

import (
	"context"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"
	"gorm.io/gorm"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/reconcile"
	"github.com/idemops/idemops/templates"
)

// Setting a channel account's tenants: administrators of every tenant of the account (issue 14
// item 2).

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
