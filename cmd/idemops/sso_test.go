package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/console"
)

func TestSSOFlags_BadValuesAreUsageErrorsNamingTheFlag(t *testing.T) {
	run := func(args ...string) (*console.Config, error) {
		cmd := &cobra.Command{Use: "x"}
		addSSOFlags(cmd.Flags())
		if err := cmd.Flags().Parse(args); err != nil {
			t.Fatal(err)
		}
		cfg := &console.Config{}
		return cfg, ssoConfig(cmd, cfg)
	}
	ok := []string{"--sso-issuer", "https://id.example", "--sso-client-id", "idemops", "--sso-redirect-url", "https://console.example/login/sso/callback"}
	cfg, err := run(append(ok, "--sso-group-map", "ops=admin:*;fin=viewer:acme", "--sso-allowed-domains", "Example.com", "--local-login=false")...)
	if err != nil || cfg.SSO == nil || !cfg.DisableLocalLogin || cfg.SSO.GroupMap["fin"].Role != access.RoleViewer ||
		cfg.SSO.AllowedDomains[0] != "example.com" || cfg.SSO.GroupsClaim != "groups" {
		t.Fatalf("%+v %v", cfg, err)
	}
	if cfg, err := run(append(ok, "--sso-scopes", "email, read:groups")...); err != nil || strings.Join(cfg.SSO.Scopes, " ") != "email read:groups" {
		t.Fatalf("--sso-scopes: %+v %v", cfg.SSO, err)
	}
	if cfg, err := run(); err != nil || cfg.SSO != nil {
		t.Fatalf("no flags: %+v %v", cfg, err)
	}
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"--local-login=false"}, "--local-login"},
		{[]string{"--sso-issuer", "id.example", "--sso-client-id", "x", "--sso-redirect-url", "https://c/cb"}, "--sso-issuer"},
		{[]string{"--sso-issuer", "https://id.example", "--sso-redirect-url", "https://c/cb"}, "--sso-client-id"},
		{[]string{"--sso-issuer", "https://id.example", "--sso-client-id", "x"}, "--sso-redirect-url"},
		{append(ok, "--sso-group-map", "ops=boss:*"), "--sso-group-map"},
		{append(ok, "--sso-allowed-domains", "a@b.com"), "--sso-allowed-domains"},
		{append(ok, "--sso-scopes", "email,openid"), "--sso-scopes"},
		{append(ok, "--sso-scopes", "email,email"), "--sso-scopes"},
	} {
		_, err := run(tc.args...)
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.flag) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: %v, want a one-line usage error naming %s", tc.args, err, tc.flag)
		}
	}
}
