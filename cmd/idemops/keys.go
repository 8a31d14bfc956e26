package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/console"
	"github.com/idemops/idemops/keys"
)

func newKeysCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keys search|show|find",
		Short: "Look keys up: search, one key with its history, find by the raw key",
		Long: `Look idempotency keys up, as the console's key pages do. With IDEMOPS_TOKEN (or --token-file)
set to an operator's API token, only that operator's tenants are seen; with the database URL
alone, every tenant (the URL reaches them all). Request and response bodies are not shown: the
console reveals them to operators, audited. With a cell map (--cells), the keys are looked up in
every cell holding one of those tenants, as the console does.`,
		Args: cobra.NoArgs,
	}
	addOperatorFlags(cmd)
	addCellsFlag(cmd.PersistentFlags())
	cmd.AddCommand(newKeysSearchCmd(), newKeysShowCmd(), newKeysFindCmd())
	return cmd
}

func newKeysSearchCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "search [--tenant T] [--operation O] [--state S] [--from T] [--to T] [--digest D] [--attention] [--limit N]",
		Short: "Search keys, newest first (the console's key search)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			q := url.Values{}
			for _, name := range []string{"tenant", "operation", "state", "from", "to", "digest", "field", "value", "after", "limit"} {
				if v, _ := cmd.Flags().GetString(name); v != "" {
					q.Set(name, v)
				}
			}
			if a, _ := cmd.Flags().GetBool("attention"); a {
				q.Set("attention", "1")
			}
			f, err := console.ParseKeyFilter(q) // the pages' and the API's parser: the same refusals
			if err != nil {
				return err
			}
			return inOperatorSession(cmd, false, func(ctx context.Context, s *operatorSession) error {
				rows, next, err := s.srv.SearchKeysFor(ctx, s.op, f)
				if err != nil {
					return err
				}
				err = writeRows(cmd.OutOrStdout(), asJSON, rows, "ID\tTENANT\tOPERATION\tSTATE\tATTEMPTS\tCREATED\tDIGEST\tATTENTION",
					func(k console.KeySummary) string {
						return fmt.Sprintf("%d\t%s\t%s\t%s\t%d\t%s\t%s\t%s", k.ID, k.Tenant, k.Operation, k.State, k.Attempts,
							k.CreatedAt.UTC().Format(time.RFC3339), k.KeyDigest[:12], yes(k.NeedsAttention))
					})
				if err != nil || asJSON {
					return err
				}
				if next != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "more: add --after %s\n", next)
				}
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.String("tenant", "", "only this tenant")
	f.String("operation", "", "only this operation (e.g. payment.charge)")
	f.String("state", "", "only this state: processing, completed, failed_retryable, failed_final")
	f.String("from", "", "created at or after (2006-01-02, 2006-01-02T15:04 or RFC 3339, UTC)")
	f.String("to", "", "created before")
	f.String("digest", "", "the key digest (64 hex characters, as logs carry it)")
	f.String("field", "", "a request field (dotted path) whose value --value must be")
	f.String("value", "", "the value of --field")
	f.Bool("attention", false, "only keys flagged as needing an operator")
	f.String("limit", "", fmt.Sprintf("at most this many (default %d, at most %d)", keys.SearchPageSize, keys.SearchMaxLimit))
	f.String("after", "", "continue after this cursor (printed by the previous page)")
	f.BoolVar(&asJSON, "json", false, "one JSON object per key")
	return cmd
}

func newKeysShowCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Show one key: its state, answer, lease and history",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil || id <= 0 {
				return usagef("key id %q: not a positive integer", args[0])
			}
			return inOperatorSession(cmd, false, func(ctx context.Context, s *operatorSession) error {
				k, evs, err := s.srv.KeyFor(ctx, s.op, id)
				if err != nil {
					return fmt.Errorf("key %d: %w", id, err)
				}
				v := keyShown(k, evs)
				out := cmd.OutOrStdout()
				if asJSON {
					enc := json.NewEncoder(out)
					enc.SetEscapeHTML(false)
					return enc.Encode(v)
				}
				w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
				fmt.Fprintf(w, "id\t%d\n", v.ID)
				fmt.Fprintf(w, "tenant\t%s\noperation\t%s\nkey\t%s\ndigest\t%s\nstate\t%s\nattempts\t%d\n", v.Tenant, v.Operation, v.Key, v.Digest, v.State, v.Attempts)
				if v.ResponseStatus != nil {
					fmt.Fprintf(w, "answer\t%d\n", *v.ResponseStatus)
				}
				for _, kv := range [][2]*string{{ptr("resource"), v.ResourceID}, {ptr("error"), v.ErrorCode}, {ptr("error detail"), v.ErrorDetail}, {ptr("lease owner"), v.LeaseOwner}} {
					if kv[1] != nil {
						fmt.Fprintf(w, "%s\t%s\n", *kv[0], *kv[1])
					}
				}
				fmt.Fprintf(w, "needs attention\t%s\nheld\t%s\nlegal hold\t%s\n", yes(v.NeedsAttention), yes(v.Held), yes(v.LegalHold))
				fmt.Fprintf(w, "created\t%s\nupdated\t%s\n", v.CreatedAt.Format(time.RFC3339), v.UpdatedAt.Format(time.RFC3339))
				fmt.Fprintf(w, "request\t%d bytes (revealed in the console, audited)\nresponse\t%d bytes\n", v.RequestBytes, v.ResponseBytes)
				w.Flush()
				fmt.Fprintln(out, "\nhistory:")
				w = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
				for _, e := range v.Events {
					fmt.Fprintf(w, "  %s\t%s\t%s\t%s\n", e.At.Format(time.RFC3339Nano), e.Kind, e.Actor, e.Detail)
				}
				return w.Flush()
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "the key and its history as one JSON object")
	return cmd
}

func newKeysFindCmd() *cobra.Command {
	var asJSON bool
	var tenant, operation string
	cmd := &cobra.Command{
		Use:   "find [--tenant T] [--operation O] < key",
		Short: "Find keys by the raw key, read from stdin or a prompt (never a flag value)",
		Long: `Find the keys whose raw key is exactly the one given, in every tenant and operation the caller
may see (narrowed by --tenant and --operation). The key is read from the first line of stdin, or
prompted for without echo on a terminal, so it never lands in shell history or a process
listing.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			key, err := readSecretLine(cmd, "Key: ")
			if err != nil {
				return err
			}
			if err := claim.ValidateKey(key); err != nil {
				return err
			}
			return inOperatorSession(cmd, false, func(ctx context.Context, s *operatorSession) error {
				rows, err := s.srv.FindKeysFor(ctx, s.op, key)
				if err != nil {
					return err
				}
				var found []console.KeySummary
				for _, k := range rows {
					if (tenant == "" || k.Tenant == tenant) && (operation == "" || k.Operation == operation) {
						found = append(found, k)
					}
				}
				out := cmd.OutOrStdout()
				if asJSON {
					return writeJSONLines(out, found)
				}
				if len(found) == 0 {
					fmt.Fprintln(cmd.ErrOrStderr(), "no key matches")
					return nil
				}
				w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "ID\tTENANT\tOPERATION\tSTATE\tCREATED\tDIGEST")
				for _, k := range found {
					fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Tenant, k.Operation, k.State, k.CreatedAt.UTC().Format(time.RFC3339), k.KeyDigest[:12])
				}
				if len(rows) >= console.MaxFound {
					fmt.Fprintf(w, "(the first %d matches)\n", console.MaxFound)
				}
				return w.Flush()
			})
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "only this tenant")
	cmd.Flags().StringVar(&operation, "operation", "", "only this operation")
	cmd.Flags().BoolVar(&asJSON, "json", false, "one JSON object per key")
	return cmd
}

// shownKey is `keys show`'s answer: the key without its bodies (their sizes only), and its history.
type shownKey struct {
	ID             int64        `json:"id"`
	Tenant         string       `json:"tenant"`
	Operation      string       `json:"operation"`
	Key            string       `json:"key"`
	Digest         string       `json:"digest"`
	State          claim.State  `json:"state"`
	Version        int64        `json:"version"`
	Attempts       int          `json:"attempts"`
	ResponseStatus *int         `json:"response_status,omitempty"`
	ResourceID     *string      `json:"resource_id,omitempty"`
	ErrorCode      *string      `json:"error_code,omitempty"`
	ErrorDetail    *string      `json:"error_detail,omitempty"`
	LeaseOwner     *string      `json:"lease_owner,omitempty"`
	NeedsAttention bool         `json:"needs_attention"`
	Held           bool         `json:"held"`
	LegalHold      bool         `json:"legal_hold"`
	RequestBytes   int          `json:"request_bytes"`
	ResponseBytes  int          `json:"response_bytes"`
	CreatedAt      time.Time    `json:"created_at"`
	UpdatedAt      time.Time    `json:"updated_at"`
	Events         []shownEvent `json:"events"`
}

type shownEvent struct {
	At     time.Time       `json:"at"`
	Kind   string          `json:"kind"`
	Actor  string          `json:"actor"`
	Detail json.RawMessage `json:"detail,omitempty"`
}

func keyShown(k *claim.Key, evs []claim.Event) shownKey {
	v := shownKey{ID: k.ID, Tenant: k.Tenant, Operation: k.Operation, Key: k.Key, Digest: k.KeyDigest, State: k.State,
		Version: k.Version, Attempts: k.Attempts, ResponseStatus: k.ResponseStatus, ResourceID: k.ResourceID,
		ErrorCode: k.ErrorCode, ErrorDetail: k.ErrorDetail, LeaseOwner: k.LeaseOwner, NeedsAttention: k.NeedsAttention,
		Held: k.Held, LegalHold: k.LegalHold, RequestBytes: len(k.Request), ResponseBytes: len(k.ResponseBody),
		CreatedAt: k.CreatedAt.UTC(), UpdatedAt: k.UpdatedAt.UTC(), Events: []shownEvent{}}
	for _, e := range evs {
		se := shownEvent{At: e.At.UTC(), Kind: e.Kind, Actor: e.Actor}
		if len(e.Detail) > 0 {
			se.Detail = json.RawMessage(e.Detail)
		}
		v.Events = append(v.Events, se)
	}
	return v
}

// writeJSONLines writes one JSON object per row.
// writeRows prints rows as JSON lines (asJSON), or as a table: header, then a line a row.
func writeRows[T any](out io.Writer, asJSON bool, rows []T, header string, line func(T) string) error {
	if asJSON {
		return writeJSONLines(out, rows)
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, header)
	for _, r := range rows {
		fmt.Fprintln(w, line(r))
	}
	return w.Flush()
}

func writeJSONLines[T any](out io.Writer, rows []T) error {
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	for _, r := range rows {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}

func yes(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func ptr(s string) *string { return &s }
