package main

import (
	"net/url"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/console"
)

// addSSOFlags adds the single sign-on flags shared by console, serve and demo.
func addSSOFlags(f *pflag.FlagSet) {
	f.String("sso-issuer", "", "OpenID Connect issuer URL; turns single sign-on on (env IDEMOPS_SSO_ISSUER)")
	f.String("sso-client-id", "", "OpenID Connect client id (env IDEMOPS_SSO_CLIENT_ID)")
	f.String("sso-client-secret", "", "OpenID Connect client secret (env IDEMOPS_SSO_CLIENT_SECRET; prefer the env)")
	f.String("sso-redirect-url", "", "this console's callback as registered, https://HOST/login/sso/callback (env IDEMOPS_SSO_REDIRECT_URL)")
	f.String("sso-allowed-domains", "", "comma-separated email domains let in; empty: any (env IDEMOPS_SSO_ALLOWED_DOMAINS)")
	f.String("sso-groups-claim", "groups", "ID token claim holding the person's groups (env IDEMOPS_SSO_GROUPS_CLAIM)")
	f.String("sso-group-map", "", "group=role:tenants;... e.g. 'ops-admins=admin:*;finance=viewer:acme,globex' (env IDEMOPS_SSO_GROUP_MAP)")
	f.String("sso-scopes", "", "comma-separated scopes asked for besides openid; empty: email,profile, and groups with --sso-group-map (env IDEMOPS_SSO_SCOPES)")
	f.Bool("local-login", true, "allow password sign-in; --local-login=false needs single sign-on (env IDEMOPS_LOCAL_LOGIN)")
}

// ssoConfig reads the single sign-on flags into the console's Config: nil SSO when no issuer is
// set. Bad values are usage errors naming the flag.
func ssoConfig(cmd *cobra.Command, cfg *console.Config) error {
	local := flagOrEnv(cmd, "local-login", "IDEMOPS_LOCAL_LOGIN")
	switch strings.ToLower(local) {
	case "", "true", "1", "yes":
	case "false", "0", "no":
		cfg.DisableLocalLogin = true
	default:
		return usagef("--local-login / IDEMOPS_LOCAL_LOGIN: %q is not true or false", local)
	}
	issuer := flagOrEnv(cmd, "sso-issuer", "IDEMOPS_SSO_ISSUER")
	if issuer == "" {
		if cfg.DisableLocalLogin {
			return usagef("--local-login=false needs single sign-on: set --sso-issuer")
		}
		return nil
	}
	sc := &console.SSOConfig{Issuer: issuer,
		ClientID:     flagOrEnv(cmd, "sso-client-id", "IDEMOPS_SSO_CLIENT_ID"),
		ClientSecret: flagOrEnv(cmd, "sso-client-secret", "IDEMOPS_SSO_CLIENT_SECRET"),
		RedirectURL:  flagOrEnv(cmd, "sso-redirect-url", "IDEMOPS_SSO_REDIRECT_URL"),
		GroupsClaim:  flagOrEnv(cmd, "sso-groups-claim", "IDEMOPS_SSO_GROUPS_CLAIM")}
	for _, u := range []struct{ flag, v string }{{"--sso-issuer", sc.Issuer}, {"--sso-redirect-url", sc.RedirectURL}} {
		p, err := url.Parse(u.v)
		if u.v == "" || err != nil || (p.Scheme != "https" && p.Scheme != "http") || p.Host == "" {
			return usagef("%s: %q is not an http(s) URL", u.flag, u.v)
		}
	}
	if sc.ClientID == "" {
		return usagef("--sso-client-id / IDEMOPS_SSO_CLIENT_ID is required with --sso-issuer")
	}
	for _, d := range strings.Split(flagOrEnv(cmd, "sso-allowed-domains", "IDEMOPS_SSO_ALLOWED_DOMAINS"), ",") {
		if d = strings.TrimSpace(d); d != "" {
			if strings.ContainsAny(d, " /@") {
				return usagef("--sso-allowed-domains: %q is not a domain", d)
			}
			sc.AllowedDomains = append(sc.AllowedDomains, strings.ToLower(d))
		}
	}
	for _, sco := range strings.Split(flagOrEnv(cmd, "sso-scopes", "IDEMOPS_SSO_SCOPES"), ",") {
		if sco = strings.TrimSpace(sco); sco != "" {
			if strings.ContainsAny(sco, " \"\\") || sco == "openid" || slices.Contains(sc.Scopes, sco) {
				return usagef("--sso-scopes: %q is not a scope to add (openid is always asked for; each once)", sco)
			}
			sc.Scopes = append(sc.Scopes, sco)
		}
	}
	gm, err := access.ParseGroupMap(flagOrEnv(cmd, "sso-group-map", "IDEMOPS_SSO_GROUP_MAP"))
	if err != nil {
		return usagef("--sso-group-map: %v", err)
	}
	sc.GroupMap = gm
	cfg.SSO = sc
	return nil
}
