package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemops/idemops/reconcile"
)

// newReconcileCmd is the parent of the reconciliation commands (parse; import, run and findings
// join it later).
func newReconcileCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "reconcile",
		Short: "Reconcile against payment-channel statements",
	}
	cmd.AddCommand(newReconcileParseCmd())
	return cmd
}

func newReconcileParseCmd() *cobra.Command {
	var (
		format, profilePath string
		asJSON              bool
		maxBytes            int64
	)
	cmd := &cobra.Command{
		Use:   "parse --format F [--profile P.yaml] FILE [--json]",
		Short: "Print a statement's normalized lines and control totals; writes nothing",
		Long: "Parse a channel statement and print its normalized lines and control totals. Nothing is\n" +
			"written and no database is opened: a preview for people and a check for parsers.\n" +
			"Formats: " + strings.Join(reconcile.Formats(), ", ") + ". A statement whose rows do not parse,\n" +
			"or whose rows do not add up to its control totals, exits non-zero.",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("reconcile parse takes one statement file, got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			parser, err := statementParser(format, profilePath, maxBytes)
			if err != nil {
				return err
			}
			f, err := os.Open(args[0])
			if err != nil {
				return err
			}
			defer f.Close()
			out := bufio.NewWriterSize(cmd.OutOrStdout(), 64<<10)
			defer out.Flush()
			p := linePrinter{w: out, json: asJSON}
			p.start()
			sum, err := parser.Parse(cmd.Context(), f, p.line)
			if err != nil && !errors.Is(err, reconcile.ErrControlTotal) {
				return err
			}
			// The summary is printed for a control-total mismatch too: it shows stated and
			// computed totals, and the command still fails because the statement is rejected.
			if perr := p.summary(sum); perr != nil {
				return perr
			}
			return err
		},
	}
	cmd.Flags().StringVar(&format, "format", "", "statement format: "+strings.Join(reconcile.Formats(), ", "))
	cmd.Flags().StringVar(&profilePath, "profile", "", "YAML profile for --format profile (implies it)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "one JSON object per line, then a summary object")
	cmd.Flags().Int64Var(&maxBytes, "max-bytes", reconcile.DefaultMaxBytes, "refuse statements larger than this (decompressed)")
	return cmd
}

// statementParser resolves the format flags; every mistake in them is a usage error (exit 2).
func statementParser(format, profilePath string, maxBytes int64) (reconcile.Parser, error) {
	if format == "" && profilePath != "" {
		format = reconcile.FormatProfile
	}
	if format == "" {
		return nil, usagef("--format is required (known: %s)", strings.Join(reconcile.Formats(), ", "))
	}
	if maxBytes <= 0 {
		return nil, usagef("--max-bytes must be positive")
	}
	opts := []reconcile.Option{reconcile.WithMaxBytes(maxBytes)}
	switch {
	case format == reconcile.FormatProfile && profilePath == "":
		return nil, usagef("--format profile needs --profile FILE.yaml")
	case format != reconcile.FormatProfile && profilePath != "":
		return nil, usagef("--profile goes with --format profile, not --format %s", format)
	case profilePath != "":
		prof, err := reconcile.LoadProfile(profilePath)
		if err != nil {
			return nil, usageError{err}
		}
		opts = append(opts, reconcile.WithProfile(prof))
	}
	p, err := reconcile.ParserFor(format, opts...)
	if err != nil {
		return nil, usageError{err}
	}
	return p, nil
}

// linePrinter streams lines as they are parsed: a million-line statement is never held.
type linePrinter struct {
	w    io.Writer
	json bool
	enc  *json.Encoder
}

// jsonLine is the --json shape of one statement line.
type jsonLine struct {
	LineNo          int    `json:"line_no"`
	ChannelTxnID    string `json:"channel_txn_id"`
	MerchantOrderNo string `json:"merchant_order_no"`
	AmountMinor     int64  `json:"amount_minor"`
	Currency        string `json:"currency"`
	Status          string `json:"status"`
	OccurredAt      string `json:"occurred_at"`
}

func (p *linePrinter) start() {
	if p.json {
		p.enc = json.NewEncoder(p.w)
		p.enc.SetEscapeHTML(false)
		return
	}
	fmt.Fprintf(p.w, "%-7s %-19s %-20s %-4s %-24s %-32s %s\n", "LINE", "STATUS", "AMOUNT", "CUR", "ORDER NO", "CHANNEL TXN ID", "OCCURRED AT (UTC)")
}

func (p *linePrinter) line(l reconcile.StatementLine) error {
	at := l.OccurredAt.Format(time.RFC3339)
	if p.json {
		return p.enc.Encode(jsonLine{l.LineNo, l.ChannelTxnID, l.MerchantOrderNo, l.AmountMinor, l.Currency, string(l.Status), at})
	}
	_, err := fmt.Fprintf(p.w, "%-7d %-19s %20s %-4s %-24s %-32s %s\n", l.LineNo, l.Status,
		reconcile.FormatMinor(l.AmountMinor, l.Currency), l.Currency, l.MerchantOrderNo, l.ChannelTxnID, at)
	return err
}

func (p *linePrinter) summary(sum *reconcile.Summary) error {
	if p.json {
		s := map[string]any{
			"format":            sum.Format,
			"lines":             sum.Lines,
			"skipped":           sum.Skipped,
			"total_minor":       sum.TotalMinor,
			"by_currency":       sum.ByCurrency,
			"control_totals_ok": sum.ControlTotalsOK(),
			"control_totals":    "none",
		}
		if sum.Control != nil {
			s["control_totals"] = sum.Control
		}
		return p.enc.Encode(map[string]any{"summary": s})
	}
	fmt.Fprintf(p.w, "\n%s: %d lines", sum.Format, sum.Lines)
	if n := sum.SkippedRows(); n > 0 {
		kinds := make([]string, 0, len(sum.Skipped))
		for k, c := range sum.Skipped {
			kinds = append(kinds, fmt.Sprintf("%s %d", k, c))
		}
		sort.Strings(kinds)
		fmt.Fprintf(p.w, ", %d rows that are not order lines skipped (%s)", n, strings.Join(kinds, ", "))
	}
	fmt.Fprintln(p.w)
	for _, cur := range sum.Currencies() {
		fmt.Fprintf(p.w, "total %s %s\n", cur, reconcile.FormatMinor(sum.ByCurrency[cur], cur))
	}
	if sum.Control == nil {
		fmt.Fprintf(p.w, "control totals: none (a %s statement states none)\n", sum.Format)
		return nil
	}
	verdict := "agree"
	if !sum.ControlTotalsOK() {
		verdict = "DO NOT AGREE: statement rejected"
	}
	fmt.Fprintf(p.w, "control totals (%s, line %d): %s\n", sum.Control.Source, sum.Control.Line, verdict)
	for _, c := range sum.Control.Checks {
		mark := "ok"
		if !c.OK {
			mark = "MISMATCH"
		}
		_, err := fmt.Fprintf(p.w, "  %-24s stated %-14s computed %-14s %s\n", c.Name, c.Stated, c.Computed, mark)
		if err != nil {
			return err
		}
	}
	return nil
}
