package console

import (
	"context"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/gin-gonic/gin"
	"golang.org/x/oauth2"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/errs"
)

// SSOConfig turns on OpenID Connect sign-in (authorization code flow with PKCE) beside, or
// instead of, local passwords.
//
// Who the person is comes from the ID token, and only from a verified email (email_verified
// true). What they may do comes from one of two places, in this order:
//  1. the group mapping: when the token's groups claim holds a mapped group, the operator named
//     by the email is created or brought in line with the mapping (highest mapped role, union of
//     mapped tenants) — the mapping is authoritative for such people;
//  2. otherwise the existing operator whose name is the email (case-insensitive), with its own
//     role and tenants.
//
// Anyone else is refused. Every sign-in, refusal and mapping decision is audited.
type SSOConfig struct {
	// Issuer is the provider's issuer URL; its discovery document is read on first use.
	Issuer string
	// ClientID and ClientSecret are this console's registration at the provider.
	ClientID, ClientSecret string
	// RedirectURL is this console's callback as registered: https://HOST/login/sso/callback.
	RedirectURL string
	// AllowedDomains, when set, are the only email domains let in (lower case, no '@').
	AllowedDomains []string
	// GroupsClaim names the ID token claim holding the person's groups (default "groups").
	GroupsClaim string
	// GroupMap maps a group to a role and tenants (see access.ParseGroupMap).
	GroupMap access.GroupMap
	// Scopes asked for besides openid. The default is email and profile, and groups too when a
	// GroupMap is set: providers such as Dex, Okta and mockoidc put the groups claim in the ID
	// token only when the groups scope is asked for. Set them when the provider names its scopes
	// otherwise (one that refuses an unknown scope, or calls its groups scope something else).
	Scopes []string
	// HTTPClient talks to the provider (default: a client with a 10 s timeout).
	HTTPClient *http.Client
}

func (c *SSOConfig) validate() error {
	switch {
	case c.Issuer == "":
		return errors.New("console: SSO issuer is required")
	case c.ClientID == "":
		return errors.New("console: SSO client id is required")
	case c.RedirectURL == "":
		return errors.New("console: SSO redirect URL is required")
	}
	if c.GroupsClaim == "" {
		c.GroupsClaim = "groups"
	}
	if len(c.Scopes) == 0 {
		c.Scopes = []string{"email", "profile"}
		if len(c.GroupMap) > 0 {
			c.Scopes = append(c.Scopes, "groups")
		}
	}
	for _, sc := range c.Scopes {
		if sc == "" || strings.ContainsAny(sc, " \"\\") || sc == oidc.ScopeOpenID {
			return fmt.Errorf("console: SSO scope %q: name each scope once, without spaces (openid is always asked for)", sc)
		}
	}
	for i, d := range c.AllowedDomains {
		c.AllowedDomains[i] = strings.ToLower(strings.TrimPrefix(strings.TrimSpace(d), "@"))
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	return nil
}

// sso holds the provider, discovered on first use (so a console starts while the provider is
// down) and kept once discovery succeeded.
type sso struct {
	cfg      SSOConfig
	mu       sync.Mutex
	verifier *oidc.IDTokenVerifier
	oauth    *oauth2.Config
}

func (o *sso) provider(ctx context.Context) (*oidc.IDTokenVerifier, *oauth2.Config, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.verifier != nil {
		return o.verifier, o.oauth, nil
	}
	p, err := oidc.NewProvider(oidc.ClientContext(ctx, o.cfg.HTTPClient), o.cfg.Issuer)
	if err != nil {
		return nil, nil, fmt.Errorf("sso discovery: %w", err)
	}
	o.verifier = p.Verifier(&oidc.Config{ClientID: o.cfg.ClientID})
	o.oauth = &oauth2.Config{ClientID: o.cfg.ClientID, ClientSecret: o.cfg.ClientSecret, RedirectURL: o.cfg.RedirectURL,
		Endpoint: p.Endpoint(), Scopes: append([]string{oidc.ScopeOpenID}, o.cfg.Scopes...)}
	return o.verifier, o.oauth, nil
}

// ssoCookie carries state, nonce and PKCE verifier from the start to the callback. It is
// SameSite=Lax: the callback is a top-level navigation from the provider's site, which a Strict
// cookie would not reach.
const ssoCookie = "idemops_sso"

type ssoPending struct {
	State    string `json:"s"`
	Nonce    string `json:"n"`
	Verifier string `json:"v"`
	Next     string `json:"x"`
}

func (s *Server) setSSOCookie(c *gin.Context, value string, maxAge int) {
	http.SetCookie(c.Writer, &http.Cookie{Name: ssoCookie, Value: value, Path: "/login/sso", MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: s.cfg.SecureCookies || c.Request.TLS != nil})
}

// ssoStart sends the browser to the provider with a fresh state, nonce and PKCE challenge.
func (s *Server) ssoStart(c *gin.Context, r *request) error {
	if s.sso == nil {
		return ErrNotFound
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), s.cfg.LookupTimeout)
	defer cancel()
	_, oc, err := s.sso.provider(ctx)
	if err != nil {
		s.cfg.Logger.Error("sso provider unavailable", "err", err)
		s.showLogin(c, http.StatusBadGateway, c.Query("next"), "", "Single sign-on is unavailable: the identity provider did not answer. Try again later.")
		return nil
	}
	p := ssoPending{State: access.RandomSecret(24), Nonce: access.RandomSecret(24), Verifier: oauth2.GenerateVerifier(), Next: safeNext(c.Query("next"))}
	raw, _ := json.Marshal(p)
	s.setSSOCookie(c, base64.RawURLEncoding.EncodeToString(raw), 600)
	c.Redirect(http.StatusFound, oc.AuthCodeURL(p.State, oidc.Nonce(p.Nonce), oauth2.S256ChallengeOption(p.Verifier)))
	return nil
}

// ssoClaims are the ID token claims read; groups are read separately (the claim name is
// configured and some providers send a single string).
type ssoClaims struct {
	Email         string `json:"email"`
	EmailVerified any    `json:"email_verified"`
}

// refuse is a refused sign-in (access.ErrSSORefused): the reason is shown and audited.
func refuse(format string, args ...any) error {
	return errs.Refused(errs.Unauthorized, errs.Phrasef(format, args...)).Of(access.ErrSSORefused)
}

// ssoCallback finishes the flow: state, code exchange with the PKCE verifier, ID token
// (signature, issuer, audience, expiry), nonce, verified email, allowed domain, then the
// operator by mapping or by email. Any refusal shows the reason, audits it and starts no
// session.
func (s *Server) ssoCallback(c *gin.Context, r *request) error {
	if s.sso == nil {
		return ErrNotFound
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), s.cfg.LookupTimeout)
	defer cancel()
	var pending ssoPending
	if v, err := c.Cookie(ssoCookie); err == nil && len(v) < 4096 {
		if raw, err := base64.RawURLEncoding.DecodeString(v); err == nil {
			_ = json.Unmarshal(raw, &pending)
		}
	}
	s.setSSOCookie(c, "", -1) // one use
	op, detail, err := s.ssoIdentify(ctx, c, pending)
	var ref *errs.RefusedError
	if errors.Is(err, access.ErrSSORefused) && errors.As(err, &ref) {
		detail["reason"] = ref.Error()
		s.cfg.Logger.Warn("sso sign-in refused", "reason", ref.Error(), "ip", r.ip)
		if err := s.audit.Append(ctx, nil, audit.Entry{Actor: "anonymous", IP: r.ip, Action: "login.sso.refused",
			Target: ssoTarget(detail), Tenants: []string{access.AllTenants}, Detail: detail}); err != nil {
			return err
		}
		s.metrics.logins.WithLabelValues("failure").Inc()
		s.showLogin(c, http.StatusUnauthorized, pending.Next, "", say(c.Request.Context(), "Single sign-on refused: %s", ref.Why))
		return nil
	}
	if err != nil {
		return err
	}
	id, err := s.sessions.Create(ctx, op, r.ip, c.Request.UserAgent())
	if err != nil {
		return err
	}
	detail["via"] = "sso"
	if err := s.audit.Append(ctx, nil, audit.Entry{Actor: op.Actor(), IP: r.ip, Action: "login", Tenants: op.Tenants, Detail: detail}); err != nil {
		return err
	}
	s.metrics.logins.WithLabelValues("success").Inc()
	s.setCookie(c, loginCookie, "", -1)
	s.setCookie(c, sessionCookie, id, int(s.cfg.AbsoluteTimeout.Seconds()))
	// The session cookie is SameSite=Strict and this response ends a navigation that began on the
	// provider's site, so a redirect would arrive without it; a same-origin refresh does not.
	next := html.EscapeString(safeNext(pending.Next))
	c.Header("Content-Type", "text/html; charset=utf-8")
	c.Header("Cache-Control", "no-store")
	c.Status(http.StatusOK)
	_, _ = fmt.Fprintf(c.Writer, `<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="0;url=%s"><title>Signed in</title></head><body><p><a href="%s">Continue</a></p></body></html>`, next, next)
	return nil
}

func ssoTarget(detail map[string]any) string {
	if e, ok := detail["email"].(string); ok && e != "" {
		return "email:" + truncate(e, 128)
	}
	return ""
}

func (s *Server) ssoIdentify(ctx context.Context, c *gin.Context, pending ssoPending) (*access.Operator, map[string]any, error) {
	detail := map[string]any{}
	if e := c.Query("error"); e != "" {
		return nil, detail, refuse("the identity provider answered %q", truncate(e, 64))
	}
	if pending.State == "" {
		return nil, detail, refuse("the sign-in started here is missing or expired; start again")
	}
	state := c.Query("state")
	if state == "" || subtle.ConstantTimeCompare([]byte(state), []byte(pending.State)) != 1 {
		return nil, detail, refuse("state does not match the sign-in started here")
	}
	code := c.Query("code")
	if code == "" || len(code) > 2048 {
		return nil, detail, refuse("no authorization code")
	}
	verifier, oc, err := s.sso.provider(ctx)
	if err != nil {
		s.cfg.Logger.Error("sso provider unavailable", "err", err)
		return nil, detail, refuse("the identity provider did not answer")
	}
	pctx := oidc.ClientContext(ctx, s.sso.cfg.HTTPClient)
	tok, err := oc.Exchange(pctx, code, oauth2.VerifierOption(pending.Verifier))
	if err != nil {
		s.cfg.Logger.Warn("sso code exchange failed", "err", err)
		return nil, detail, refuse("the identity provider refused the authorization code")
	}
	rawID, _ := tok.Extra("id_token").(string)
	if rawID == "" {
		return nil, detail, refuse("the identity provider sent no ID token")
	}
	idt, err := verifier.Verify(pctx, rawID)
	if err != nil {
		return nil, detail, refuse("ID token not accepted: %s", idTokenReason(err))
	}
	if subtle.ConstantTimeCompare([]byte(idt.Nonce), []byte(pending.Nonce)) != 1 {
		return nil, detail, refuse("ID token nonce does not match the sign-in started here")
	}
	var cl ssoClaims
	all := map[string]any{}
	if err := idt.Claims(&cl); err != nil {
		return nil, detail, refuse("ID token claims unreadable")
	}
	_ = idt.Claims(&all)
	email := strings.ToLower(strings.TrimSpace(cl.Email))
	detail["email"], detail["subject"] = truncate(email, 128), truncate(idt.Subject, 128)
	if email == "" {
		return nil, detail, refuse("the ID token carries no email")
	}
	if v, ok := cl.EmailVerified.(bool); !ok || !v {
		if sv, ok := cl.EmailVerified.(string); !ok || sv != "true" {
			return nil, detail, refuse("email %s is not verified by the identity provider", email)
		}
	}
	_, domain, _ := strings.Cut(email, "@")
	if len(s.sso.cfg.AllowedDomains) > 0 && !slices.Contains(s.sso.cfg.AllowedDomains, domain) {
		return nil, detail, refuse("email domain %q is not allowed", truncate(domain, 64))
	}
	groups := claimStrings(all[s.sso.cfg.GroupsClaim])
	op, err := s.ops.SignInSSO(ctx, c.ClientIP(), email, groups, s.sso.cfg.GroupMap, detail)
	return op, detail, err
}

// idTokenReason names why go-oidc refused a token in words an operator can act on.
func idTokenReason(err error) string {
	var exp *oidc.TokenExpiredError
	switch msg := err.Error(); {
	case errors.As(err, &exp):
		return "expired"
	case strings.Contains(msg, "expected audience"):
		return "issued for another client (audience)"
	case strings.Contains(msg, "issued by a different provider"):
		return "issued by another provider"
	case strings.Contains(msg, "signature"):
		return "bad signature"
	default:
		return truncate(msg, 120)
	}
}

// claimStrings reads a groups claim: a list of strings, or one string.
func claimStrings(v any) []string {
	var out []string
	switch t := v.(type) {
	case string:
		out = append(out, t)
	case []any:
		for _, e := range t {
			if s, ok := e.(string); ok && len(out) < 1000 {
				out = append(out, s)
			}
		}
	}
	return out
}
