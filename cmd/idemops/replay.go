package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"

	"github.com/spf13/cobra"
)

func newReplayCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "replay preview|request|approve",
		Short: "Manual replays of one key: preview, request with a reason, approve (four eyes)",
		Long: `A manual replay, through the same workflow as the console's replay pages (package replay):
preview it (the operation's downstream lookup, read-only; it prints a confirmation token bound to
the key's version and to you), request it with that token and a reason, and — for an amount above
the approval threshold — have a second operator approve it. Each step acts as the operator whose
API token is in IDEMOPS_TOKEN (or --token-file), within that operator's tenants, and is audited.
A replay executes the key's operation: --operations (or IDEMOPS_OPERATIONS) names its downstream.
With a cell map (--cells), the key is found in its own cell and replayed there, audited in the
control cell, as the console does.`,
		Args: cobra.NoArgs,
	}
	addOperatorFlags(cmd)
	addCellsFlag(cmd.PersistentFlags())
	cmd.AddCommand(newReplayPreviewCmd(), newReplayRequestCmd(), newReplayApproveCmd())
	return cmd
}

func parseIDArg(what, s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, usagef("%s id %q: not a positive integer", what, s)
	}
	return id, nil
}

// withOperatorID is the RunE of a command on one object of an operator's: its argument parsed
// as what's id, an operator session opened, and run called within the CLI's time limit.
func withOperatorID(what string, run func(ctx context.Context, cmd *cobra.Command, s *operatorSession, id int64) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		id, err := parseIDArg(what, args[0])
		if err != nil {
			return err
		}
		return inOperatorSession(cmd, true, func(ctx context.Context, s *operatorSession) error {
			return run(ctx, cmd, s, id)
		})
	}
}

func newReplayPreviewCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "preview KEY_ID",
		Short: "What a replay of the key would do, and the token that confirms it",
		Args:  cobra.ExactArgs(1),
		RunE: withOperatorID("key", func(ctx context.Context, cmd *cobra.Command, s *operatorSession, id int64) error {
			p, err := s.srv.PreviewReplay(ctx, s.op, "cli", id)
			if err != nil {
				return fmt.Errorf("key %d: %w", id, err)
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return encodeJSON(out, p)
			}
			fmt.Fprintf(out, "key %d (version %d, %s): %s\n", p.KeyID, p.Version, p.State, p.Text)
			if p.Action != "" {
				fmt.Fprintf(out, "would send: %s\n", p.Action)
			}
			if !p.Allowed {
				return nil
			}
			if p.NeedsApproval {
				fmt.Fprintln(out, "needs a second operator's approval (idemops replay approve REQUEST_ID)")
			}
			fmt.Fprintf(out, "confirm with: idemops replay request %d --confirm %s --reason '…'\n", p.KeyID, p.Token)
			return nil
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "the preview as JSON (the API's GET /api/v1/keys/{id}/replay)")
	return cmd
}

func newReplayRequestCmd() *cobra.Command {
	var asJSON bool
	var token, reason string
	cmd := &cobra.Command{
		Use:   "request KEY_ID --confirm TOKEN --reason TEXT",
		Short: "Request the previewed replay (executed now, or once approved)",
		Args:  cobra.ExactArgs(1),
		RunE: withOperatorID("key", func(ctx context.Context, cmd *cobra.Command, s *operatorSession, id int64) error {
			req, dup, err := s.srv.ConfirmReplay(ctx, s.op, "cli", id, token, reason)
			if err != nil {
				return fmt.Errorf("key %d: %w", id, err)
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return encodeJSON(out, req)
			}
			if dup {
				fmt.Fprintln(out, "this token was used before: the same request, nothing executed again")
			}
			printReplayRequest(out, req.ID, req.State, req.NeedsApproval, req.OutcomeKind, req.Outcome)
			return nil
		}),
	}
	cmd.Flags().StringVar(&token, "confirm", "", "the token `replay preview` printed")
	cmd.Flags().StringVar(&reason, "reason", "", "why (kept with the request and in the audit log)")
	_ = cmd.MarkFlagRequired("confirm")
	_ = cmd.MarkFlagRequired("reason")
	cmd.Flags().BoolVar(&asJSON, "json", false, "the request as JSON")
	return cmd
}

func newReplayApproveCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "approve REQUEST_ID",
		Short: "Approve another operator's replay request (it executes now)",
		Args:  cobra.ExactArgs(1),
		RunE: withOperatorID("request", func(ctx context.Context, cmd *cobra.Command, s *operatorSession, id int64) error {
			req, err := s.srv.ApproveReplay(ctx, s.op, "cli", id)
			if err != nil {
				return fmt.Errorf("replay request %d: %w", id, err)
			}
			if asJSON {
				return encodeJSON(cmd.OutOrStdout(), req)
			}
			printReplayRequest(cmd.OutOrStdout(), req.ID, req.State, req.NeedsApproval, req.OutcomeKind, req.Outcome)
			return nil
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "the request as JSON")
	return cmd
}

func printReplayRequest(out io.Writer, id int64, state string, needsApproval bool, kind, outcome *string) {
	fmt.Fprintf(out, "replay request %d: %s", id, state)
	if kind != nil {
		fmt.Fprintf(out, " (%s)", *kind)
	}
	if outcome != nil {
		fmt.Fprintf(out, ": %s", *outcome)
	}
	fmt.Fprintln(out)
	if state == "pending" && needsApproval {
		fmt.Fprintf(out, "waiting for a second operator: idemops replay approve %d\n", id)
	}
}

func encodeJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
