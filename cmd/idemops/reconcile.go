package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/money"
	"github.com/idemops/idemops/reconcile"
)

// newReconcileCmd is the parent of the reconciliation commands: parse (no database), import,
// run, findings and jobs (these open the database).
func newReconcileCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "reconcile",
		Short: "Reconcile against payment-channel statements",
	}
	cmd.AddCommand(newReconcileParseCmd(), newReconcileImportCmd(), newReconcileRunCmd(), newReconcileFindingsCmd(),
		newReconcileJobsCmd(), newReconcileChannelCmd())
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
			"or whose rows do not add up to its control totals, exits non-zero. FILE may be plain, gzip, or a\n" +
			"zip holding the statement and its summary (Alipay's 业务明细 and 业务明细(汇总)).",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("reconcile parse takes one statement file, got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := statementParser(format, profilePath, maxBytes); err != nil {
				return err
			}
			u, closeFile, err := openPacked(args[0], maxBytes)
			if err != nil {
				return err
			}
			defer closeFile()
			parser, err := statementParser(format, profilePath, maxBytes, reconcile.WithSummaryFile(u.Summary))
			if err != nil {
				return err
			}
			out := bufio.NewWriterSize(cmd.OutOrStdout(), 64<<10)
			defer out.Flush()
			p := linePrinter{w: out, json: asJSON}
			p.start()
			sum, err := parser.Parse(cmd.Context(), u.Statement, p.line)
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

// openPacked opens a statement file as it came — plain, gzip, or a zip with the statement and
// its summary (Alipay) — within the archive limits; a refused archive is one line, exit 1, a
// missing or unreadable file exit 2.
func openPacked(path string, maxBytes int64) (*reconcile.Unpacked, func(), error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fileArg(err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, fileArg(err)
	}
	if st.IsDir() {
		f.Close()
		return nil, nil, usagef("%s: a folder, not a statement file", path)
	}
	u, err := reconcile.Unpack(f, st.Size(), reconcile.ArchiveLimits{MaxBytes: maxBytes})
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return u, func() { u.Close(); f.Close() }, nil
}

// statementParser resolves the format flags; every mistake in them is a usage error (exit 2).
func statementParser(format, profilePath string, maxBytes int64, more ...reconcile.Option) (reconcile.Parser, error) {
	if format == "" && profilePath != "" {
		format = reconcile.FormatProfile
	}
	if format == "" {
		return nil, usagef("--format is required (known: %s)", strings.Join(reconcile.Formats(), ", "))
	}
	if maxBytes <= 0 {
		return nil, usagef("--max-bytes must be positive")
	}
	opts := append([]reconcile.Option{reconcile.WithMaxBytes(maxBytes)}, more...)
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
	// fee and net in minor units, exact at the channel's precision (WeChat fees: 0.02 fen)
	FeeMinor    reconcile.SubMinor `json:"fee_minor"`
	NetMinor    reconcile.SubMinor `json:"net_minor"`
	NetCurrency string             `json:"net_currency,omitempty"`
}

func (p *linePrinter) start() {
	if p.json {
		p.enc = json.NewEncoder(p.w)
		p.enc.SetEscapeHTML(false)
		return
	}
	fmt.Fprintf(p.w, "%-7s %-19s %-20s %-4s %-24s %-32s %-20s %12s %20s\n", "LINE", "STATUS", "AMOUNT", "CUR", "ORDER NO", "CHANNEL TXN ID", "OCCURRED AT (UTC)", "FEE", "NET")
}

func (p *linePrinter) line(l reconcile.StatementLine) error {
	at := l.OccurredAt.Format(time.RFC3339)
	if p.json {
		return p.enc.Encode(jsonLine{l.LineNo, l.ChannelTxnID, l.MerchantOrderNo, l.AmountMinor, l.Currency, string(l.Status), at,
			l.FeeMinor, l.NetMinor, l.NetCurrency})
	}
	netCur := l.Currency
	if l.NetCurrency != "" {
		netCur = l.NetCurrency
	}
	net := formatSubMinor(l.NetMinor, netCur)
	if l.NetCurrency != "" {
		net += " " + l.NetCurrency
	}
	_, err := fmt.Fprintf(p.w, "%-7d %-19s %20s %-4s %-24s %-32s %-20s %12s %20s\n", l.LineNo, l.Status,
		money.Format(l.AmountMinor, l.Currency), l.Currency, l.MerchantOrderNo, l.ChannelTxnID, at,
		formatSubMinor(l.FeeMinor, netCur), net)
	return err
}

// formatSubMinor renders a fee or net in major units, exact: at least the currency's decimals,
// more where the channel stated more (a WeChat fee of 0.00020).
func formatSubMinor(v reconcile.SubMinor, currency string) string {
	exp, _ := money.Exponent(currency)
	s := money.FormatScaled(int64(v), exp+3)
	for i := 0; i < 3 && strings.HasSuffix(s, "0"); i++ {
		s = s[:len(s)-1]
	}
	return strings.TrimSuffix(s, ".")
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
		if len(sum.Settlements) > 0 {
			s["settlements"] = sum.Settlements
			s["settlements_ok"] = sum.SettlementsOK()
		}
		return p.enc.Encode(map[string]any{"summary": s})
	}
	defer p.settlements(sum)
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
		fmt.Fprintf(p.w, "total %s %s\n", cur, money.Format(sum.ByCurrency[cur], cur))
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

// settlements prints each settlement the statement states next to what its rows add up to.
func (p *linePrinter) settlements(sum *reconcile.Summary) {
	if sum == nil || len(sum.Settlements) == 0 {
		return
	}
	fmt.Fprintln(p.w, "settlements (stated by the statement, against the net of its rows):")
	for _, st := range sum.Settlements {
		mark := "ok"
		if !st.OK() {
			mark = "MISMATCH " + formatSubMinor(st.Difference, st.Currency) + " (a SETTLEMENT_MISMATCH when imported)"
		}
		fmt.Fprintf(p.w, "  %-32s %s stated %-14s computed %-14s %s [%s, line %d]\n", st.Group, st.Currency,
			formatSubMinor(st.Stated, st.Currency), formatSubMinor(st.Computed, st.Currency), mark, st.Source, st.Line)
	}
}

// feeFlags are the fee schedule flags of reconcile import and reconcile jobs add.
type feeFlags struct {
	rate, rounding, refunds string
	fixed                   int64
	decimals                int
}

func (f *feeFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.rate, "fee-rate-bp", "", "check each line's fee against this rate, in basis points (60 = 0.60%); a line that differs is a FEE_MISMATCH")
	fs.Int64Var(&f.fixed, "fee-fixed-minor", 0, "fixed part of a charge's fee, in minor units (with --fee-rate-bp)")
	fs.StringVar(&f.rounding, "fee-rounding", "half_up", "how the fee is rounded: "+strings.Join(reconcile.FeeRoundings, ", "))
	fs.IntVar(&f.decimals, "fee-decimals", 0, "decimals below the minor unit the fee is rounded to (0..3; WeChat Pay: 3)")
	fs.StringVar(&f.refunds, "fee-refunds", "returned", "a refund's fee: returned (negative, the rate part) or kept (none)")
}

// schedule is the schedule the flags describe, nil without --fee-rate-bp; a bad value is a
// usage error naming the flag's field.
func (f *feeFlags) schedule() (*reconcile.FeeSchedule, error) {
	if f.rate == "" {
		return nil, nil
	}
	fs := &reconcile.FeeSchedule{RateBP: f.rate, FixedMinor: f.fixed, Rounding: f.rounding, Decimals: f.decimals, Refunds: f.refunds}
	if err := fs.Validate(); err != nil {
		return nil, usageError{err}
	}
	return fs, nil
}

// openReconciler opens the database (migrated) and a Reconciler on it; with a cell map (the
// commands that take --cells), the control cell's, reaching every cell.
func openReconciler(cmd *cobra.Command) (*database, *reconcile.Reconciler, error) {
	d, err := openDatabase(cmd.Context(), cmd, true, true)
	if err != nil {
		return nil, nil, err
	}
	// Channel credentials open with the deployment secret; without one, a run of a channel
	// account's job fails saying so.
	secret, _ := digestSecret(cmd, d)
	rcfg, err := reconSources(cmd, secret)
	if err != nil {
		d.Close()
		return nil, nil, err
	}
	rcfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	if d.cellMap != nil {
		// With a cell map (import, run) the statement goes into the cells of the channel
		// account's tenants, as the daemon's recon job sends it: each cell's claim store needs
		// the secret.
		if secret, err = digestSecret(cmd, d); err != nil {
			d.Close()
			return nil, nil, err
		}
		set, err := d.Cells(cmd.Context(), claim.Config{DigestSecret: secret, Logger: rcfg.Logger})
		if err != nil {
			d.Close()
			return nil, nil, err
		}
		rcfg.Cells = cellReconcilers(set, daemonDeps{Recon: rcfg, Logger: rcfg.Logger})
	}
	r, err := reconcile.New(d.DB, rcfg)
	if err != nil {
		d.Close()
		return nil, nil, err
	}
	return d, r, nil
}

// barProgress draws a byte progress bar on stderr when it is a terminal, and says which phase
// the run is in.
type barProgress struct {
	bar *progressbar.ProgressBar
}

func newBarProgress(size int64) daemon.Progress {
	if !term.IsTerminal(int(os.Stderr.Fd())) {
		return daemon.NopProgress{}
	}
	if size <= 0 {
		size = -1
	}
	return &barProgress{bar: progressbar.DefaultBytes(size, "importing")}
}

func (p *barProgress) Report(phase string, done, total int64) {
	switch phase {
	case reconcile.PhaseRead:
		_ = p.bar.Set64(done)
	case "waiting":
		p.bar.Describe(fmt.Sprintf("statement not ready, attempt %d", done))
	case reconcile.PhaseMatch:
		p.bar.Describe("matched")
		_ = p.bar.Finish()
	}
}

func newReconcileImportCmd() *cobra.Command {
	var (
		channel, format, profilePath, date, zone, job string
		operations                                    []string
		grace                                         time.Duration
		maxBytes                                      int64
		asJSON                                        bool
		fees                                          feeFlags
	)
	cmd := &cobra.Command{
		Use:   "import --channel C --format F FILE",
		Short: "Import a statement (all lines or none) and match it against the local keys",
		Long: "Import a channel statement into statements/statement_lines in one transaction and match it.\n" +
			"The same file again is a no-op (it is matched again); another file for the same channel and\n" +
			"date becomes the next version and the difference is shown. Which local keys the statement\n" +
			"covers comes from --job, or from --operation, --tz and --grace; without either LOCAL_ONLY is\n" +
			"not checked. Prints the run; exits 1 when the statement is rejected or a line does not parse.",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("reconcile import takes one statement file, got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if channel == "" && job == "" {
				return usagef("--channel is required (or --job)")
			}
			if format == "" && job != "" && profilePath == "" {
				format = "-" // resolved from the job below
			}
			loc := time.UTC
			if zone != "" {
				var err error
				if loc, err = time.LoadLocation(zone); err != nil {
					return usagef("--tz: unknown time zone %q", zone)
				}
			}
			if profilePath != "" { // a bad profile is refused before the database is opened
				if _, err := statementParser(format, profilePath, maxBytes); err != nil {
					return err
				}
			}
			sha, size, err := reconcile.HashFile(args[0])
			if err != nil {
				return fileArg(err)
			}
			d, r, err := openReconciler(cmd)
			if err != nil {
				return err
			}
			defer d.Close()
			req := reconcile.RunRequest{Import: reconcile.ImportRequest{Channel: channel, BillDate: date, Location: loc,
				Importer: operatorActor(), SHA256: sha, Size: size}}
			if job != "" {
				j, err := r.GetJob(cmd.Context(), job)
				if err != nil {
					return err
				}
				req.Job = j
				if channel == "" {
					req.Import.Channel = j.Channel
				}
				if format == "-" {
					format = j.Format
				}
				if zone == "" {
					req.Import.Location = j.Location()
				}
			}
			if len(operations) > 0 || job == "" {
				req.Match = &reconcile.MatchSettings{Operations: operations, Location: req.Import.Location, Grace: grace}
			}
			schedule, err := fees.schedule()
			if err != nil {
				return err
			}
			if schedule != nil {
				if req.Match == nil {
					ms := req.Job.MatchSettings()
					req.Match = &ms
				}
				req.Match.Fees = schedule
			} else if req.Match != nil && req.Job != nil {
				req.Match.Fees = req.Job.FeeSchedule
			}
			// The file is read once per database it is imported into: once, or, with a cell map,
			// once in each cell holding one of the channel account's tenants.
			read := func(ctx context.Context, rec *reconcile.Reconciler, req reconcile.RunRequest, p daemon.Progress) (*reconcile.Run, error) {
				u, closeFile, err := openPacked(args[0], maxBytes)
				if err != nil {
					return nil, err
				}
				defer closeFile()
				parser, err := statementParser(format, profilePath, maxBytes, reconcile.WithSummaryFile(u.Summary))
				if err != nil {
					return nil, err
				}
				req.Import.Parser, req.Import.Format = parser, parser.Format()
				if u.Packing != reconcile.PackingPlain { // the hash and size are the package's
					req.Import.SHA256, req.Import.Size = "", 0
				}
				return rec.Reconcile(ctx, req, u.Statement, p)
			}
			run, err := r.ReconcileEach(cmd.Context(), req, read, newBarProgress(size))
			if run != nil {
				if perr := printReconRun(cmd.OutOrStdout(), run, asJSON); perr != nil && err == nil {
					err = perr
				}
			}
			return err
		},
	}
	cmd.Flags().StringVar(&channel, "channel", "", "the channel the statement comes from (e.g. wechat)")
	cmd.Flags().StringVar(&format, "format", "", "statement format: "+strings.Join(reconcile.Formats(), ", "))
	cmd.Flags().StringVar(&profilePath, "profile", "", "YAML profile for --format profile (implies it)")
	cmd.Flags().StringVar(&date, "date", "", "bill date YYYY-MM-DD (default: the day most lines fall on in --tz)")
	cmd.Flags().StringVar(&zone, "tz", "", "the channel's time zone (default: the job's, else UTC)")
	cmd.Flags().StringVar(&job, "job", "", "take channel, format, operations, zone and grace from this recon job")
	cmd.Flags().StringSliceVar(&operations, "operation", nil, "operation whose keys the statement covers (repeatable)")
	cmd.Flags().DurationVar(&grace, "grace", 10*time.Minute, "keys completed this close to midnight are not LOCAL_ONLY")
	cmd.Flags().Int64Var(&maxBytes, "max-bytes", reconcile.DefaultMaxBytes, "refuse statements larger than this (decompressed)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the run as JSON")
	fees.register(cmd.Flags())
	addCellsFlag(cmd.Flags())
	return cmd
}

func newReconcileRunCmd() *cobra.Command {
	var (
		job, date string
		asJSON    bool
	)
	cmd := &cobra.Command{
		Use:   "run --job NAME [--date D]",
		Short: "Run a recon job now: fetch its statement (waiting until it is ready), import and match it",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if job == "" {
				return usagef("--job is required")
			}
			d, r, err := openReconciler(cmd)
			if err != nil {
				return err
			}
			defer d.Close()
			j, err := r.GetJob(cmd.Context(), job)
			if err != nil {
				return err
			}
			run, err := r.RunJob(cmd.Context(), j, date, operatorActor(), newBarProgress(0))
			if run != nil {
				if perr := printReconRun(cmd.OutOrStdout(), run, asJSON); perr != nil && err == nil {
					err = perr
				}
			}
			return err
		},
	}
	cmd.Flags().StringVar(&job, "job", "", "the recon job to run")
	cmd.Flags().StringVar(&date, "date", "", "bill date YYYY-MM-DD (default: today in the job's zone minus its offset)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the run as JSON")
	addCellsFlag(cmd.Flags())
	return cmd
}

// printReconRun prints a reconciliation run: what was imported, what changed, and the findings per kind.
func printReconRun(w io.Writer, run *reconcile.Run, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetEscapeHTML(false)
		return enc.Encode(run)
	}
	date := "-"
	if run.BillDate != nil {
		date = *run.BillDate
	}
	fmt.Fprintf(w, "run %d: %s, %s %s\n", run.ID, run.Status, run.Channel, date)
	if run.StatementID != nil {
		ver := 0
		if run.StatementVer != nil {
			ver = *run.StatementVer
		}
		how := "imported"
		if run.AlreadyImported {
			how = "already imported; matched again"
		}
		fmt.Fprintf(w, "statement %d (version %d): %s, %d lines loaded, %d matched to local keys\n",
			*run.StatementID, ver, how, run.RowsLoaded, run.RowsMatched)
	}
	if df := run.Diff; df != nil {
		fmt.Fprintf(w, "against version %d: %d added, %d removed, %d changed\n", df.PreviousVersion, df.Added, df.Removed, df.Changed)
	}
	if len(run.Counts) == 0 && run.Status == reconcile.RunSucceeded {
		fmt.Fprintln(w, "findings: none")
	}
	kinds := make([]string, 0, len(run.Counts))
	for k := range run.Counts {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		fmt.Fprintf(w, "  %-24s %d\n", k, run.Counts[k])
	}
	if len(kinds) > 0 {
		fmt.Fprintf(w, "see: idemops reconcile findings --run %d\n", run.ID)
	}
	return nil
}

func newReconcileFindingsCmd() *cobra.Command {
	var (
		runID       int64
		kind, state string
		limit       int
		asJSON      bool
	)
	cmd := &cobra.Command{
		Use:   "findings --run ID [--json]",
		Short: "List the findings of a run (those it was the last run to find)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runID <= 0 {
				return usagef("--run is required (a run id)")
			}
			d, r, err := openReconciler(cmd)
			if err != nil {
				return err
			}
			defer d.Close()
			if _, err := r.GetRun(cmd.Context(), runID); err != nil {
				return err
			}
			fs, err := r.ListFindings(cmd.Context(), reconcile.FindingFilter{RunID: runID, Kind: reconcile.Kind(kind),
				State: reconcile.FindingState(state), Limit: limit})
			if err != nil {
				return err
			}
			out := bufio.NewWriter(cmd.OutOrStdout())
			defer out.Flush()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetEscapeHTML(false)
				for _, f := range fs {
					if err := enc.Encode(f); err != nil {
						return err
					}
				}
				return nil
			}
			fmt.Fprintf(out, "%-8s %-24s %-9s %-10s %-40s %s\n", "ID", "KIND", "STATE", "KEY", "SUBJECT", "DETAIL")
			for _, f := range fs {
				key := "-"
				if f.KeyID != nil {
					key = fmt.Sprint(*f.KeyID)
				}
				fmt.Fprintf(out, "%-8d %-24s %-9s %-10s %-40s %s\n", f.ID, f.Kind, f.State, key, f.Subject, f.Detail)
			}
			return nil
		},
	}
	cmd.Flags().Int64Var(&runID, "run", 0, "the run whose findings to list")
	cmd.Flags().StringVar(&kind, "kind", "", "only this kind (e.g. CHANNEL_ONLY)")
	cmd.Flags().StringVar(&state, "state", "", "only this state: open, resolved, ignored")
	cmd.Flags().IntVar(&limit, "limit", 1000, "at most this many (newest first, ≤ 1000)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "one JSON object per finding")
	return cmd
}

func newReconcileJobsCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "jobs add|list", Short: "Manage scheduled recon jobs"}
	var spec reconcile.JobSpec
	var disabled bool
	var fees feeFlags
	add := &cobra.Command{
		Use:   "add --name N --channel C --format F --source S --operation OP --cron SPEC [--tz Z]",
		Short: "Add a recon job (validates the cron spec and shows its next five runs)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			spec.Enabled = !disabled
			var err error
			if spec.FeeSchedule, err = fees.schedule(); err != nil {
				return err
			}
			if err := spec.Validate(); err != nil {
				return usageError{err}
			}
			d, r, err := openReconciler(cmd)
			if err != nil {
				return err
			}
			defer d.Close()
			j, err := r.CreateJob(cmd.Context(), spec)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "added recon job %s (id %d); next runs:\n", j.Name, j.ID)
			next, _ := reconcile.NextRuns(j.CronSpec, j.TimeZone, time.Now(), 5)
			for _, t := range next {
				fmt.Fprintf(cmd.OutOrStdout(), "  %s\n", t.Format("2006-01-02 15:04 MST"))
			}
			return nil
		},
	}
	f := add.Flags()
	f.StringVar(&spec.Name, "name", "", "job name")
	f.StringVar(&spec.Channel, "channel", "", "channel (e.g. wechat)")
	f.StringVar(&spec.Format, "format", "", "statement format: "+strings.Join(reconcile.Formats(), ", "))
	f.StringVar(&spec.Source, "source", "", "file path pattern or http(s) URL template with {date} (or {yyyymmdd}); empty for a channel account's job")
	f.StringVar(&spec.Bill, "bill", "", "which bill of a channel account: tradebill or fundflowbill (WeChat Pay), trade or signcustomer (Alipay)")
	f.StringSliceVar(&spec.Operations, "operation", nil, "operation whose keys the channel settles (repeatable)")
	f.IntVar(&spec.BillDateOffsetDays, "offset", 1, "bill date = today in --tz minus this many days")
	f.StringVar(&spec.CronSpec, "cron", "", "cron spec, five fields or @daily etc. (e.g. \"0 11 * * *\")")
	f.StringVar(&spec.TimeZone, "tz", "UTC", "time zone of the cron spec and the bill date")
	f.IntVar(&spec.GraceSeconds, "grace", 600, "seconds before midnight whose keys are not LOCAL_ONLY yet")
	f.IntVar(&spec.ReadyDeadlineSeconds, "deadline", 7200, "seconds to keep retrying a statement that is not ready")
	f.BoolVar(&disabled, "disabled", false, "add the job disabled")
	fees.register(f)

	list := reconListCmd("List recon jobs with their next run", "job", (*reconcile.Reconciler).ListJobs,
		func(out io.Writer, jobs []reconcile.ReconJob) {
			fmt.Fprintf(out, "%-20s %-10s %-8s %-8s %-16s %-16s %-22s %s\n", "NAME", "CHANNEL", "FORMAT", "ENABLED", "CRON", "ZONE", "NEXT RUN", "SOURCE")
			for _, j := range jobs {
				next := "-"
				if ts, _ := reconcile.NextRuns(j.CronSpec, j.TimeZone, time.Now(), 1); len(ts) == 1 && j.Enabled {
					next = ts[0].Format("2006-01-02 15:04 MST")
				}
				fmt.Fprintf(out, "%-20s %-10s %-8s %-8t %-16s %-16s %-22s %s\n", j.Name, j.Channel, j.Format, j.Enabled, j.CronSpec, j.TimeZone, next, j.Source)
			}
		})
	cmd.AddCommand(add, list)
	return cmd
}

// reconListCmd is a `list [--json]` command over the reconciler: one JSON object per item with
// --json, else the table text writes.
func reconListCmd[T any](short, item string, load func(*reconcile.Reconciler, context.Context) ([]T, error), text func(io.Writer, []T)) *cobra.Command {
	var asJSON bool
	list := &cobra.Command{
		Use:   "list [--json]",
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, r, err := openReconciler(cmd)
			if err != nil {
				return err
			}
			defer d.Close()
			items, err := load(r, cmd.Context())
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if !asJSON {
				text(out, items)
				return nil
			}
			enc := json.NewEncoder(out)
			enc.SetEscapeHTML(false)
			for _, it := range items {
				if err := enc.Encode(it); err != nil {
					return err
				}
			}
			return nil
		},
	}
	list.Flags().BoolVar(&asJSON, "json", false, "one JSON object per "+item)
	return list
}
