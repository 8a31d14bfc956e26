package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/console"
)

// operatorSession is what the operator commands (keys, replay, findings) work with: the
// console's functions over the database, and the operator they act as.
type operatorSession struct {
	d   *database
	srv *console.Server
	op  *access.Operator
	// closeCells closes the console's handles on the cells (a command with --cells).
	closeCells func()
}

func (s *operatorSession) Close() {
	s.srv.Close()
	s.closeCells()
	s.d.Close()
}

// addOperatorFlags declares the flags every operator command shares.
func addOperatorFlags(cmd *cobra.Command) {
	cmd.PersistentFlags().String("token-file", "", "read the operator's API token (idemops user token NAME) from this file instead of IDEMOPS_TOKEN")
	cmd.PersistentFlags().String("digest-secret", "", "deployment secret (env IDEMOPS_DIGEST_SECRET; unset: <data-dir>/digest-secret)")
	cmd.PersistentFlags().String("operations", "", "YAML file of downstream operations, for replay previews and replays (env IDEMOPS_OPERATIONS)")
}

// operatorToken is the API token from --token-file or IDEMOPS_TOKEN ("" when neither): a secret,
// so never a flag value that shell history keeps.
func operatorToken(cmd *cobra.Command) (string, error) {
	if path, _ := cmd.Flags().GetString("token-file"); path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", usageError{err}
		}
		return strings.TrimSpace(string(b)), nil
	}
	return strings.TrimSpace(os.Getenv("IDEMOPS_TOKEN")), nil
}

// openOperatorSession opens the database (DATABASE_URL; never a private cluster: these commands
// read what a running deployment or demo holds) and decides who acts: the owner of the operator
// token, within that operator's tenants; without a token, console.Everyone — every tenant, as
// the database URL reaches them all — unless needOperator (an action, audited under a name).
func openOperatorSession(cmd *cobra.Command, needOperator bool) (*operatorSession, error) {
	ctx := cmd.Context()
	token, err := operatorToken(cmd)
	if err != nil {
		return nil, err
	}
	if token == "" && needOperator {
		return nil, usagef("this acts as an operator: set IDEMOPS_TOKEN (or --token-file) to an operator's API token (idemops user token NAME)")
	}
	ops, err := loadOperations(cmd)
	if err != nil {
		return nil, err
	}
	d, err := openDatabase(ctx, cmd, false, false)
	if err != nil {
		return nil, err
	}
	secret, err := digestSecret(cmd, d)
	if err != nil {
		d.Close()
		return nil, err
	}
	quiet := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	claims := claim.Config{DigestSecret: secret, Logger: quiet, Owner: "cli"}
	store, err := claim.NewStore(d.DB, claims)
	if err != nil {
		d.Close()
		return nil, err
	}
	cdb, err := d.ConsoleDB(ctx)
	if err != nil {
		d.Close()
		return nil, err
	}
	ccfg := console.Config{DB: cdb, Claims: store, Operations: operationSet{ops}.Get, Logger: quiet}
	// With a cell map (the commands that take --cells): keys are read in their cells, as the
	// console reads them; operators and the audit log stay the control cell's.
	closeCells, err := consoleCells(ctx, d, claims, &ccfg)
	if err != nil {
		d.Close()
		return nil, err
	}
	srv, err := console.New(ccfg)
	if err != nil {
		closeCells()
		d.Close()
		return nil, err
	}
	s := &operatorSession{d: d, srv: srv, op: console.Everyone, closeCells: closeCells}
	if token != "" {
		if s.op, err = srv.Operators().ByToken(ctx, token); err != nil {
			s.Close()
			return nil, fmt.Errorf("operator token (IDEMOPS_TOKEN / --token-file): %w", err)
		}
	}
	return s, nil
}

// readSecretLine reads one line from stdin, or prompts for it on the terminal without echo: a
// raw key or token never sits in a flag value that shell history and process listings keep.
func readSecretLine(cmd *cobra.Command, prompt string) (string, error) {
	in := cmd.InOrStdin()
	if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprint(cmd.ErrOrStderr(), prompt)
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(cmd.ErrOrStderr())
		return string(b), err
	}
	line, err := bufio.NewReader(io.LimitReader(in, 4096)).ReadString('\n')
	if err != nil && err != io.EOF {
		return "", err
	}
	return strings.TrimRight(line, "\r\n"), nil
}

// cliContext bounds one command's database work.
func cliContext(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	return context.WithTimeout(cmd.Context(), time.Minute)
}

// inOperatorSession opens an operator session (openOperatorSession), runs fn in it within the
// CLI's time limit (cliContext), and closes it.
func inOperatorSession(cmd *cobra.Command, needOperator bool, fn func(ctx context.Context, s *operatorSession) error) error {
	s, err := openOperatorSession(cmd, needOperator)
	if err != nil {
		return err
	}
	defer s.Close()
	ctx, cancel := cliContext(cmd)
	defer cancel()
	return fn(ctx, s)
}
