package main

import (
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/idemops/idemops/reconcile"
)

// Where statements may be fetched from, and the key channel credentials are sealed with: flags
// every command that reconciles (daemon, console, serve, demo, reconcile) shares.

// addReconSourceFlags declares the statement-source flags on the root, for every command.
func addReconSourceFlags(root *cobra.Command) {
	f := root.PersistentFlags()
	f.String("recon-source-allow", "", "origins statements may also be fetched from, comma-separated scheme://host:port, besides each channel's API hosts (env IDEMOPS_RECON_SOURCE_ALLOW); a loopback or private address only when named by its IP")
	f.String("recon-file-root", "", "the directory local file sources must be under; unset: file sources are refused (env IDEMOPS_RECON_FILE_ROOT)")
	f.String("previous-digest-secret", "", "the deployment secret before a change of it: channel credentials it sealed still open and are sealed again under the new one (env IDEMOPS_PREVIOUS_DIGEST_SECRET)")
	f.String("findings-approval-above", "", "a bulk action on more findings than this waits for a second operator's approval (env IDEMOPS_FINDINGS_APPROVAL_ABOVE; default 1000)")
}

// reconSources is the reconcile configuration of the flags: the source policy (plus extra
// origins, the demo's paysim) and the keyring derived from the deployment secret.
func reconSources(cmd *cobra.Command, secret []byte, extra ...string) (reconcile.Config, error) {
	var allow []string
	for _, o := range strings.Split(flagOrEnv(cmd, "recon-source-allow", "IDEMOPS_RECON_SOURCE_ALLOW"), ",") {
		if o = strings.TrimSpace(o); o != "" {
			allow = append(allow, o)
		}
	}
	cfg := reconcile.Config{Sources: reconcile.SourcePolicy{Allow: append(allow, extra...),
		FileRoot: flagOrEnv(cmd, "recon-file-root", "IDEMOPS_RECON_FILE_ROOT")}}
	if v := flagOrEnv(cmd, "findings-approval-above", "IDEMOPS_FINDINGS_APPROVAL_ABOVE"); v != "" {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 1 {
			return cfg, usagef("--findings-approval-above: %q is not a positive number of findings", v)
		}
		cfg.BulkApprovalAbove = n
	}
	if len(secret) > 0 {
		k, err := reconcile.NewKeyring(secret, []byte(flagOrEnv(cmd, "previous-digest-secret", "IDEMOPS_PREVIOUS_DIGEST_SECRET")))
		if err != nil {
			return cfg, usageError{err}
		}
		cfg.Keyring = k
	}
	// The policy is checked here, so a bad origin is a usage error (exit 2) naming the flag.
	if _, err := reconcile.New(nil, cfg); err != nil {
		return cfg, usagef("--recon-source-allow / --recon-file-root: %v", err)
	}
	return cfg, nil
}
