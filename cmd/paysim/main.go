// Command paysim runs the payment-channel simulator (package downstream/paysim) as an HTTP
// server: idempotent charges, refunds and notifications, lookups, statements in the WeChat Pay,
// Alipay, Stripe and Adyen layouts, and deterministic faults.
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemops/idemops/downstream/paysim"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, nil)
	stop()
	os.Exit(code)
}

// usageError marks bad command-line input (exit 2).
type usageError struct{ error }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// run is the whole command; ready, when set, receives the listening address.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, ready chan<- string) int {
	cmd := newCommand(stdout, stderr, ready)
	cmd.SetArgs(args)
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	err := cmd.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	msg, _, _ := strings.Cut(err.Error(), "\n")
	fmt.Fprintln(stderr, "paysim:", msg)
	if errors.As(err, &usageError{}) {
		return 2
	}
	return 1
}

type options struct {
	addr                         string
	seed                         int64
	latency, jitter              time.Duration
	errorRate, dropRate, dblRate float64
	declinePayees                []string
	declineAmounts               []int64
	feeBPS, maxCharges           int
	stateFile                    string
	notifyURL, notifySecret      string
	notifyDup, notifyReorder     float64
	notifyDelayRate, lateClose   float64
	notifyDelay                  time.Duration
	billReady, wechatBillMode    string
	wechatBillParts              int
	wechatPublicKey              bool
	wechatLife, alipayLife       time.Duration
}

func newCommand(stdout, stderr io.Writer, ready chan<- string) *cobra.Command {
	var o options
	cmd := &cobra.Command{
		Use:   "paysim",
		Short: "Payment-channel simulator: idempotent charges, lookups, statements and faults",
		Long: `paysim simulates a payment channel for idemops: POST /charges (idempotent on the
Idempotency-Key header), GET /charges/{merchant_order_no}, refunds, receipt notifications,
GET /statements/{YYYY-MM-DD}?format=wechat|alipay|stripe|adyen, the channels' own statement
protocols (WeChat Pay APIv3 /v3/bill/..., Alipay /gateway.do, Stripe /v1/..., Adyen
/reports/download/...; merchants register their keys with POST /_paysim/protocol/merchants and
read paysim's with GET /_paysim/protocol), and admin endpoints under /_paysim/ to fabricate
anomalies. Faults are deterministic for a --seed; the X-Paysim-Fault
request header forces them per request. See the downstream/paysim package doc.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unexpected argument %q (paysim takes flags only)", args[0])
			}
			return nil
		},
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return serve(cmd.Context(), o, stdout, stderr, ready)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.addr, "addr", "127.0.0.1:8090", "address to listen on (port 0: any free port)")
	f.Int64Var(&o.seed, "seed", 1, "seed for fault decisions and ids")
	f.DurationVar(&o.latency, "latency", 0, "latency added to every charge, refund, lookup and notification call")
	f.DurationVar(&o.jitter, "latency-jitter", 0, "up to this much more latency, drawn from the seed")
	f.Float64Var(&o.errorRate, "error-rate", 0, "share of calls answered 503 before committing (0-1)")
	f.Float64Var(&o.dropRate, "drop-response-rate", 0, "share of writes committed and then left without an answer (0-1)")
	f.Float64Var(&o.dblRate, "double-charge-rate", 0, "share of charges sent without a key that are charged twice (0-1)")
	f.StringSliceVar(&o.declinePayees, "decline-payees", []string{"blocked"}, "payees whose charges are declined")
	f.Int64SliceVar(&o.declineAmounts, "decline-amounts", nil, "amounts (minor units) that are declined")
	f.IntVar(&o.feeBPS, "fee-bps", 60, "channel fee in basis points (0 for none)")
	f.IntVar(&o.maxCharges, "max-charges", 100_000, "most charges (and refunds, notifications) held in memory")
	f.StringVar(&o.stateFile, "state-file", "", "JSON file the state is loaded from and saved to (empty: memory only)")
	f.StringVar(&o.notifyURL, "notify-url", "", "URL asynchronous callbacks (charge.succeeded/closed/refunded) are POSTed to (empty: none)")
	f.StringVar(&o.notifySecret, "notify-secret", "", "HMAC-SHA256 secret callbacks are signed with (default paysim-notify-secret; env PAYSIM_NOTIFY_SECRET)")
	f.Float64Var(&o.notifyDup, "notify-duplicate-rate", 0, "share of callbacks sent again after their acknowledgement (0-1)")
	f.Float64Var(&o.notifyReorder, "notify-reorder-rate", 0, "share of callbacks held back behind the order's next one (0-1)")
	f.Float64Var(&o.notifyDelayRate, "notify-delay-rate", 0, "share of callbacks first sent after --notify-delay (0-1)")
	f.DurationVar(&o.notifyDelay, "notify-delay", 2*time.Second, "delay of a delayed callback, and the longest a reordered one is held")
	f.Float64Var(&o.lateClose, "late-close-rate", 0, "share of succeeded charges followed by a stale charge.closed callback (0-1)")
	f.StringVar(&o.billReady, "bill-ready", paysim.ReadyAnytime, "when a date's WeChat Pay, Alipay and Adyen bills can be had: anytime, or next-day-10:00 (the channels' rule)")
	f.StringVar(&o.wechatBillMode, "wechat-bill-mode", paysim.WechatBillPlain, "how WeChat Pay's bill queries answer: plain, encrypted (AEAD_AES_256_GCM) or split (encrypted parts in bill_sequence)")
	f.IntVar(&o.wechatBillParts, "wechat-bill-parts", 3, "parts of a split WeChat Pay bill (1-16)")
	f.BoolVar(&o.wechatPublicKey, "wechat-public-key-mode", false, "sign WeChat Pay answers with a WeChat Pay public key (PUB_KEY_ID_…) instead of a platform certificate")
	f.DurationVar(&o.wechatLife, "wechat-download-life", 5*time.Minute, "how long a WeChat Pay download_url lives")
	f.DurationVar(&o.alipayLife, "alipay-download-life", 30*time.Second, "how long an Alipay bill_download_url lives")
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	return cmd
}

func (o options) validate() error {
	for _, r := range []struct {
		flag string
		v    float64
	}{{"--error-rate", o.errorRate}, {"--drop-response-rate", o.dropRate}, {"--double-charge-rate", o.dblRate},
		{"--notify-duplicate-rate", o.notifyDup}, {"--notify-reorder-rate", o.notifyReorder},
		{"--notify-delay-rate", o.notifyDelayRate}, {"--late-close-rate", o.lateClose}} {
		if !(r.v >= 0 && r.v <= 1) {
			return usagef("%s: must be between 0 and 1, got %v", r.flag, r.v)
		}
	}
	switch {
	case o.latency < 0:
		return usagef("--latency: must not be negative, got %v", o.latency)
	case o.jitter < 0:
		return usagef("--latency-jitter: must not be negative, got %v", o.jitter)
	case o.latency+o.jitter > time.Minute:
		return usagef("--latency plus --latency-jitter: must be at most 1m")
	case o.feeBPS < 0 || o.feeBPS > 10000:
		return usagef("--fee-bps: must be between 0 and 10000, got %d", o.feeBPS)
	case o.notifyDelay <= 0 || o.notifyDelay > time.Hour:
		return usagef("--notify-delay: must be between 0 and 1h, got %v", o.notifyDelay)
	case o.notifyURL != "" && !strings.HasPrefix(o.notifyURL, "http://") && !strings.HasPrefix(o.notifyURL, "https://"):
		return usagef("--notify-url: %q is not an http(s) URL", o.notifyURL)
	case o.maxCharges < 1:
		return usagef("--max-charges: must be at least 1, got %d", o.maxCharges)
	case o.billReady != paysim.ReadyAnytime && o.billReady != paysim.ReadyNextDay10:
		return usagef("--bill-ready: %q is neither %s nor %s", o.billReady, paysim.ReadyAnytime, paysim.ReadyNextDay10)
	case o.wechatBillMode != paysim.WechatBillPlain && o.wechatBillMode != paysim.WechatBillEncrypted && o.wechatBillMode != paysim.WechatBillSplit:
		return usagef("--wechat-bill-mode: %q is not plain, encrypted or split", o.wechatBillMode)
	case o.wechatBillParts < 1 || o.wechatBillParts > 16:
		return usagef("--wechat-bill-parts: must be 1 to 16, got %d", o.wechatBillParts)
	case o.wechatLife <= 0 || o.alipayLife <= 0:
		return usagef("--wechat-download-life and --alipay-download-life must be positive")
	}
	if _, _, err := net.SplitHostPort(o.addr); err != nil {
		return usagef("--addr: %q is not host:port", o.addr)
	}
	return nil
}

func serve(ctx context.Context, o options, stdout, stderr io.Writer, ready chan<- string) error {
	if err := o.validate(); err != nil {
		return err
	}
	fee := o.feeBPS
	if fee == 0 {
		fee = -1 // the library's "no fee"
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	sim, err := paysim.NewServer(paysim.Config{
		Seed: o.seed, Latency: o.latency, LatencyJitter: o.jitter,
		ErrorRate: o.errorRate, DropResponseRate: o.dropRate, DoubleChargeRate: o.dblRate,
		DeclinePayees: o.declinePayees, DeclineAmounts: o.declineAmounts, FeeBasisPoints: fee,
		MaxCharges: o.maxCharges, MaxRefunds: o.maxCharges, MaxNotifications: o.maxCharges,
		StateFile: o.stateFile, Logger: logger,
		NotifyURL: o.notifyURL, NotifySecret: []byte(cmp.Or(o.notifySecret, os.Getenv("PAYSIM_NOTIFY_SECRET"))),
		NotifyDuplicateRate: o.notifyDup, NotifyReorderRate: o.notifyReorder, NotifyDelayRate: o.notifyDelayRate,
		NotifyDelay: o.notifyDelay, LateCloseRate: o.lateClose,
		BillReady: o.billReady, WechatBillMode: o.wechatBillMode, WechatBillParts: o.wechatBillParts,
		WechatPublicKeyMode: o.wechatPublicKey, WechatDownloadLife: o.wechatLife, AlipayDownloadLife: o.alipayLife,
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		sim.Close()
		return fmt.Errorf("--addr: %w", err)
	}
	srv := &http.Server{Handler: sim, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	addr := ln.Addr().String()
	fmt.Fprintf(stdout, "paysim listening on http://%s (seed %d)\n", addr, o.seed)
	if ready != nil {
		ready <- addr
	}

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		sim.Close()
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = srv.Shutdown(shutdown)
	if cerr := sim.Close(); cerr != nil && err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	fmt.Fprintln(stdout, "paysim stopped")
	return nil
}
