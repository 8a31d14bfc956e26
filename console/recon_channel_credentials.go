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
	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/reconcile"
	"github.com/idemops/idemops/templates"
)

// A channel account's fetcher (issue 34): its kind and settings, and its credentials — private
// keys, API keys, report passwords — are configured by administrators of every tenant (*)
// only. A credential is never shown again once saved: the API answers, the page shows and the
// audit log records its name, label and a short digest, never its value.

// starAdminOnly refuses anyone but an administrator of every tenant, audited.
func (s *Server) starAdminOnly(ctx context.Context, r *request, action, target string) error {
	if r.op.Role >= access.RoleAdmin && r.op.SeesAllTenants() {
		return nil
	}
	err := errs.Refused(errs.Forbidden, errs.Phrasef("only administrators of every tenant (*) configure a channel account's fetcher and credentials"))
	s.auditRefusal(ctx, r, action, target, err)
	return err
}

// channelSettingsInput is the body of POST /api/v1/reconcile/channels/{name}/settings.
type channelSettingsInput struct {
	Kind     string          `json:"kind"`
	Settings json.RawMessage `json:"settings"`
}

// setChannelSettings sets an account's kind and settings, with its audit row.
func (s *Server) setChannelSettings(ctx context.Context, r *request, channel string, in channelSettingsInput) (*reconcile.ChannelAccount, error) {
	const action = "reconcile.channel.settings"
	if err := s.starAdminOnly(ctx, r, action, "channel:"+channel); err != nil {
		return nil, err
	}
	settings, err := reconcile.ParseAccountSettings(in.Settings)
	if err != nil {
		return nil, err
	}
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		saved, err := s.recon.SetChannelSettings(ctx, tx, channel, strings.TrimSpace(in.Kind), settings, r.op.Actor())
		if err != nil {
			return err
		}
		keyIDs := []string{}
		for _, k := range saved.PlatformKeys {
			keyIDs = append(keyIDs, k.ID)
		}
		return s.audit.Append(ctx, tx, audit.Entry{Actor: r.op.Actor(), IP: r.ip, Action: action, Target: "channel:" + channel,
			Tenants: s.channelAuditTenants(ctx, channel), Detail: map[string]any{"kind": in.Kind, "api_base": saved.APIBase,
				"platform_keys": keyIDs, "mchid": saved.MchID, "app_id": saved.AppID, "merchant_account": saved.MerchantAccount}})
	})
	if err != nil {
		return nil, err
	}
	return s.recon.ChannelAccount(ctx, channel)
}

// setChannelCredential saves one credential, with its audit row: name, label, digest, never the
// value.
func (s *Server) setChannelCredential(ctx context.Context, r *request, channel, name string, in reconcile.CredentialInput) (*reconcile.CredentialInfo, error) {
	const action = "reconcile.channel.credential"
	if err := s.starAdminOnly(ctx, r, action, "channel:"+channel+"/"+name); err != nil {
		return nil, err
	}
	var info *reconcile.CredentialInfo
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var err error
		if info, err = s.recon.SetCredential(ctx, tx, channel, name, in, r.op.Actor()); err != nil {
			return err
		}
		detail := map[string]any{"credential": name, "label": info.Label, "digest": info.Digest, "value": "[redacted]"}
		if info.File != "" {
			detail["file"] = info.File
		}
		return s.audit.Append(ctx, tx, audit.Entry{Actor: r.op.Actor(), IP: r.ip, Action: action, Target: "channel:" + channel + "/" + name,
			Tenants: s.channelAuditTenants(ctx, channel), Detail: detail})
	})
	return info, err
}

// deleteChannelCredential removes one credential, with its audit row.
func (s *Server) deleteChannelCredential(ctx context.Context, r *request, channel, name string) error {
	const action = "reconcile.channel.credential.delete"
	if err := s.starAdminOnly(ctx, r, action, "channel:"+channel+"/"+name); err != nil {
		return err
	}
	return s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := reconcile.DeleteCredential(ctx, tx, channel, name); err != nil {
			return err
		}
		return s.audit.Append(ctx, tx, audit.Entry{Actor: r.op.Actor(), IP: r.ip, Action: action, Target: "channel:" + channel + "/" + name,
			Tenants: s.channelAuditTenants(ctx, channel), Detail: map[string]any{"credential": name}})
	})
}

// apiChannelAccount is GET /api/v1/reconcile/channels/{name}: the account's kind, settings and
// credentials (without their values), for operators who cover it.
func (s *Server) apiChannelAccount(c *gin.Context, r *request) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	a, err := s.recon.ChannelAccount(ctx, c.Param("name"))
	if err != nil {
		return err
	}
	if !r.op.SeesAllTenants() {
		a.Credentials = nil // which files hold them, and their digests: * administrators' business
	}
	c.JSON(http.StatusOK, a)
	return nil
}

// apiSetChannelSettings is POST /api/v1/reconcile/channels/{name}/settings: {kind, settings}.
func (s *Server) apiSetChannelSettings(c *gin.Context, r *request) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	if err := s.starAdminOnly(ctx, r, "reconcile.channel.settings", "channel:"+c.Param("name")); err != nil {
		return err
	}
	var in channelSettingsInput
	if err := bindJSON(c, &in); err != nil {
		return err
	}
	a, err := s.setChannelSettings(ctx, r, c.Param("name"), in)
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, a)
	return nil
}

// apiSetChannelCredential is POST /api/v1/reconcile/channels/{name}/credentials/{credential}:
// {value | file, label}; the answer describes the saved credential without its value.
func (s *Server) apiSetChannelCredential(c *gin.Context, r *request) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	if err := s.starAdminOnly(ctx, r, "reconcile.channel.credential", "channel:"+c.Param("name")+"/"+c.Param("credential")); err != nil {
		return err
	}
	var in reconcile.CredentialInput
	if err := bindJSON(c, &in); err != nil {
		return err
	}
	info, err := s.setChannelCredential(ctx, r, c.Param("name"), c.Param("credential"), in)
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, info)
	return nil
}

// apiDeleteChannelCredential is POST /api/v1/reconcile/channels/{name}/credentials/{credential}/delete.
func (s *Server) apiDeleteChannelCredential(c *gin.Context, r *request) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	if err := s.deleteChannelCredential(ctx, r, c.Param("name"), c.Param("credential")); err != nil {
		return err
	}
	c.Status(http.StatusNoContent)
	return nil
}

// setChannelSettingsPage is POST /reconcile/channels/{name}/settings (kind, settings JSON).
func (s *Server) setChannelSettingsPage(c *gin.Context, r *request) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	in := channelSettingsInput{Kind: c.PostForm("kind"), Settings: json.RawMessage(c.PostForm("settings"))}
	_, err := s.setChannelSettings(ctx, r, c.Param("name"), in)
	return s.channelFormDone(c, r, err)
}

// setChannelCredentialPage is POST /reconcile/channels/{name}/credentials (credential, value or
// file, label).
func (s *Server) setChannelCredentialPage(c *gin.Context, r *request) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	in := reconcile.CredentialInput{Value: c.PostForm("value"), File: strings.TrimSpace(c.PostForm("file")),
		Label: strings.TrimSpace(c.PostForm("label"))}
	_, err := s.setChannelCredential(ctx, r, c.Param("name"), c.PostForm("credential"), in)
	return s.channelFormDone(c, r, err)
}

// channelFormDone redirects back to the channel accounts after a form, or shows its error there.
func (s *Server) channelFormDone(c *gin.Context, r *request, err error) error {
	if err == nil {
		c.Redirect(http.StatusSeeOther, "/reconcile?notice=channel#channel-"+url.PathEscape(c.Param("name")))
		return nil
	}
	if !isFormError(err) {
		return err
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	v, verr := s.reconView(ctx, r)
	if verr != nil {
		return verr
	}
	v.Channels.Error = pageMessage(c.Request.Context(), err)
	s.render(c, http.StatusBadRequest, templates.ReconPage(chrome(r, "reconcile"), v))
	return nil
}
