package console

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/reconcile"
	"github.com/idemops/idemops/templates"
)

// The channel accounts' table on the reconciliation page (issue 14 item 2).

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
