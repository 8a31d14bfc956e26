package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/console"
)

// digestSecret returns --digest-secret / IDEMOPS_DIGEST_SECRET; when neither is set, the secret
// kept in <data-dir>/digest-secret (the demo's, so the CLI works against the demo's database with
// only its DATABASE_URL exported), saying which file it read; with the private cluster and no
// such file, a fresh one is generated and kept there.
func digestSecret(cmd *cobra.Command, d *database) ([]byte, error) {
	if v := flagOrEnv(cmd, "digest-secret", "IDEMOPS_DIGEST_SECRET"); v != "" {
		if len(v) < 16 {
			return nil, usagef("--digest-secret / IDEMOPS_DIGEST_SECRET must be at least 16 characters")
		}
		return []byte(v), nil
	}
	path := dataPath(cmd, "digest-secret")
	b, err := os.ReadFile(path)
	switch kept := strings.TrimSpace(string(b)); {
	case err == nil && len(kept) >= 16:
		fmt.Fprintf(cmd.ErrOrStderr(), "idemops: IDEMOPS_DIGEST_SECRET is unset; using the secret kept in %s\n", path)
		return []byte(kept), nil
	case err == nil:
		return nil, usagef("%s holds fewer than 16 characters: not a digest secret", path)
	case !errors.Is(err, fs.ErrNotExist):
		return nil, usagef("IDEMOPS_DIGEST_SECRET is unset and %s cannot be read: %v", path, err)
	case d.cluster == nil:
		return nil, usagef("IDEMOPS_DIGEST_SECRET is unset and there is no %s: set it to the deployment's key-digest secret (at least 16 characters), or --data-dir to the folder that keeps it", path)
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return nil, err
	}
	secret := hex.EncodeToString(raw)
	if err := os.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("write digest secret: %w", err)
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "idemops: IDEMOPS_DIGEST_SECRET is unset; generated one into %s for the private cluster\n", path)
	return []byte(secret), nil
}

func newConsoleCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "console",
		Short: "Run the operator console (web UI, /api/v1, /metrics)",
		Long: `Run the operator console. Sign in with an operator made by 'idemops user add'.
The digest secret comes from IDEMOPS_DIGEST_SECRET (with the private cluster it is generated
beside the data directory when unset).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			addr, _ := cmd.Flags().GetString("addr")
			secure, _ := cmd.Flags().GetBool("secure-cookies")
			if _, _, err := net.SplitHostPort(addr); err != nil { // before the database is touched
				return usagef("--addr %q: %v", addr, err)
			}
			ops, err := loadOperations(cmd) // a bad file stops start-up before the database is touched
			if err != nil {
				return err
			}
			d, err := openDatabase(ctx, cmd, true, true)
			if err != nil {
				return err
			}
			defer d.Close()
			secret, err := digestSecret(cmd, d)
			if err != nil {
				return err
			}
			rcfg, err := reconSources(cmd, secret)
			if err != nil {
				return err
			}
			cdb, err := d.ConsoleDB(ctx)
			if err != nil {
				return err
			}
			ccfg := console.Config{DB: cdb, DigestSecret: secret, SecureCookies: secure, Operations: operationSet{ops}.Get, Reconcile: rcfg}
			if err := ssoConfig(cmd, &ccfg); err != nil {
				return err
			}
			closeCells, err := consoleCells(ctx, d, claim.Config{DigestSecret: secret}, &ccfg)
			if err != nil {
				return err
			}
			defer closeCells()
			srv, err := console.New(ccfg)
			if err != nil {
				return err
			}
			defer srv.Close() // stops running bulk replays between keys
			if ops, err := srv.Operators().List(ctx); err == nil && len(ops) == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "idemops: no operators yet; create one with: idemops user add NAME --role admin --tenants '*'")
			}
			ln, err := listen(addr, "addr")
			if err != nil {
				return err
			}
			hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
				WriteTimeout: 60 * time.Second, IdleTimeout: 120 * time.Second}
			slog.Info("console listening", "addr", "http://"+ln.Addr().String())
			errc := make(chan error, 1)
			go func() { errc <- hs.Serve(ln) }()
			select {
			case err := <-errc:
				return err
			case <-ctx.Done():
				sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				return hs.Shutdown(sctx)
			}
		},
	}
	cmd.Flags().String("addr", "127.0.0.1:8080", "address to listen on")
	cmd.Flags().Bool("secure-cookies", false, "mark cookies Secure (behind a TLS-terminating proxy)")
	cmd.Flags().String("operations", "", "YAML file of downstream operations for replays and checks (env IDEMOPS_OPERATIONS)")
	addSSOFlags(cmd.Flags())
	addCellsFlag(cmd.Flags())
	return cmd
}

// readPassword reads a new password from stdin (--password-stdin: the first line) or prompts
// twice on the terminal.
func readPassword(cmd *cobra.Command) (string, error) {
	fromStdin, _ := cmd.Flags().GetBool("password-stdin")
	if fromStdin {
		line, err := bufio.NewReader(io.LimitReader(cmd.InOrStdin(), 4096)).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return "", err
		}
		return strings.TrimRight(line, "\r\n"), nil
	}
	fd := int(os.Stdin.Fd())
	if !term.IsTerminal(fd) {
		return "", usagef("no terminal to prompt for the password: use --password-stdin")
	}
	fmt.Fprint(cmd.ErrOrStderr(), "Password: ")
	a, err := term.ReadPassword(fd)
	fmt.Fprintln(cmd.ErrOrStderr())
	if err != nil {
		return "", err
	}
	fmt.Fprint(cmd.ErrOrStderr(), "Again: ")
	b, err := term.ReadPassword(fd)
	fmt.Fprintln(cmd.ErrOrStderr())
	if err != nil {
		return "", err
	}
	if string(a) != string(b) {
		return "", usagef("the passwords differ")
	}
	return string(a), nil
}

func withOperators(cmd *cobra.Command, fn func(ctx context.Context, ops *access.Operators) error) error {
	ctx := cmd.Context()
	d, err := openDatabase(ctx, cmd, true, true)
	if err != nil {
		return err
	}
	defer d.Close()
	secret, err := digestSecret(cmd, d) // operator changes are audited, sealed under its key
	if err != nil {
		return err
	}
	return fn(ctx, access.NewOperators(d.DB, access.DefaultArgon2, audit.New(d.DB, secret)))
}

func newUserCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "user", Short: "Manage console operators: add, passwd, disable, enable, token"}
	cmd.PersistentFlags().String("digest-secret", "", "deployment secret (env IDEMOPS_DIGEST_SECRET): the audit log's key is derived from it")
	add := &cobra.Command{
		Use:   "add NAME --role viewer|operator|admin --tenants a,b|*",
		Short: "Add an operator",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			roleFlag, _ := cmd.Flags().GetString("role")
			tenantsFlag, _ := cmd.Flags().GetString("tenants")
			role, err := access.ParseRole(roleFlag)
			if err != nil {
				return usagef("--role: %s is not one of viewer, operator, admin", roleFlag)
			}
			tenants, err := access.ParseTenants(tenantsFlag)
			if err != nil {
				return usagef("--tenants: %v", err)
			}
			pw, err := readPassword(cmd)
			if err != nil {
				return err
			}
			return withOperators(cmd, func(ctx context.Context, ops *access.Operators) error {
				o, err := ops.Add(ctx, access.Change{Actor: operatorActor()}, access.NewOperator{Name: args[0], Password: pw, Role: role, Tenants: tenants})
				if err == nil {
					fmt.Fprintf(cmd.OutOrStdout(), "added %s (%s, tenants %s)\n", o.Name, o.Role, strings.Join(o.Tenants, ","))
				}
				return err
			})
		},
	}
	add.Flags().String("role", "viewer", "viewer, operator or admin")
	add.Flags().String("tenants", "", "comma-separated tenants the operator may see, or * for all")
	add.Flags().Bool("password-stdin", false, "read the password from the first line of stdin")
	_ = add.MarkFlagRequired("tenants")

	passwd := &cobra.Command{
		Use:   "passwd NAME",
		Short: "Set an operator's password (ends their sessions)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			pw, err := readPassword(cmd)
			if err != nil {
				return err
			}
			return withOperators(cmd, func(ctx context.Context, ops *access.Operators) error {
				err := ops.SetPassword(ctx, access.Change{Actor: operatorActor()}, args[0], pw)
				if err == nil {
					fmt.Fprintf(cmd.OutOrStdout(), "password of %s changed\n", args[0])
				}
				return err
			})
		},
	}
	passwd.Flags().Bool("password-stdin", false, "read the password from the first line of stdin")

	status := func(use, short string, disabled bool) *cobra.Command {
		return &cobra.Command{
			Use: use + " NAME", Short: short, Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				return withOperators(cmd, func(ctx context.Context, ops *access.Operators) error {
					err := ops.SetDisabled(ctx, access.Change{Actor: operatorActor()}, args[0], disabled)
					if err == nil {
						fmt.Fprintf(cmd.OutOrStdout(), "%s: %sd\n", args[0], use)
					}
					return err
				})
			},
		}
	}
	token := &cobra.Command{
		Use:   "token NAME --label LABEL",
		Short: "Create an API token for /api/v1 (printed once)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			label, _ := cmd.Flags().GetString("label")
			ttl, _ := cmd.Flags().GetDuration("ttl")
			return withOperators(cmd, func(ctx context.Context, ops *access.Operators) error {
				secret, err := ops.CreateToken(ctx, access.Change{Actor: operatorActor()}, args[0], label, ttl)
				if err == nil {
					fmt.Fprintln(cmd.OutOrStdout(), secret)
				}
				return err
			})
		},
	}
	token.Flags().String("label", "cli", "a name for the token")
	token.Flags().Duration("ttl", 0, "token lifetime (0: no expiry)")
	cmd.AddCommand(add, passwd, status("disable", "Disable an operator (ends sessions, stops tokens)", true),
		status("enable", "Enable a disabled operator", false), token)
	return cmd
}
