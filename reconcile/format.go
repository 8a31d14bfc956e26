package reconcile

import (
	"context"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"time"
	_ "time/tzdata" // statements name IANA zones; do not depend on the host's zoneinfo

	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/money"
)

// Parser reads one statement format.
type Parser interface {
	// Format is the name the parser is registered under ("wechat", "alipay", ...).
	Format() string
	// Parse streams the statement in r, calling fn once per order line in file order, and
	// returns the summary with the statement's control totals. It holds one row at a time.
	//
	// Errors: a row that does not parse is a *LineError (ErrMalformed) and stops the parse;
	// details that do not add up to the statement's control totals return the summary together
	// with a *ControlTotalError (ErrControlTotal); input beyond the size limit is ErrTooLarge;
	// an error from fn is returned as it is. Lines reach fn before the totals are read, so a
	// caller that stores them must discard them all when Parse returns an error.
	Parse(ctx context.Context, r io.Reader, fn func(StatementLine) error) (*Summary, error)
}

// Size limits applied when no option says otherwise.
const (
	DefaultMaxBytes     int64 = 1 << 30 // a 1M-line WeChat bill is about 400 MB
	DefaultMaxLineBytes       = 64 << 10
)

type options struct {
	maxBytes int64
	maxLine  int
	profile  *Profile
	summary  io.Reader
}

// Option adjusts a parser.
type Option func(*options)

// WithMaxBytes limits the size of the statement (decompressed); beyond it Parse fails with
// ErrTooLarge.
func WithMaxBytes(n int64) Option { return func(o *options) { o.maxBytes = n } }

// WithMaxLineBytes limits one line (or one record spanning lines).
func WithMaxLineBytes(n int) Option { return func(o *options) { o.maxLine = n } }

// WithSummaryFile supplies the statement's separate summary file, read after the detail:
// Alipay's 业务明细(汇总), whose 合计 row states the day's settlement (实收净额). Other formats
// state their settlements in the detail file and ignore it.
func WithSummaryFile(r io.Reader) Option { return func(o *options) { o.summary = r } }

// WithProfile supplies the CSV profile the "profile" format reads with.
func WithProfile(p *Profile) Option { return func(o *options) { o.profile = p } }

func buildOptions(opts []Option) options {
	o := options{maxBytes: DefaultMaxBytes, maxLine: DefaultMaxLineBytes}
	for _, opt := range opts {
		opt(&o)
	}
	if o.maxBytes <= 0 {
		o.maxBytes = DefaultMaxBytes
	}
	if o.maxLine < 64 {
		o.maxLine = 64
	}
	return o
}

// FormatProfile is the name of the generic CSV format described by a YAML profile.
const FormatProfile = "profile"

var registry = map[string]func(options) (Parser, error){
	"wechat": func(o options) (Parser, error) { return wechatParser{o}, nil },
	"alipay": func(o options) (Parser, error) { return alipayParser{o}, nil },
	"stripe": func(o options) (Parser, error) { return stripeParser{o}, nil },
	"adyen":  func(o options) (Parser, error) { return adyenParser{o}, nil },
	FormatProfile: func(o options) (Parser, error) {
		if o.profile == nil {
			return nil, fmt.Errorf("%w: format %q needs a profile file", ErrProfile, FormatProfile)
		}
		return profileParser{o}, nil
	},
}

// Formats lists the statement formats ParserFor knows, sorted.
func Formats() []string {
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ParserFor returns the parser of a format listed by Formats. The "profile" format needs
// WithProfile. Errors: ErrUnknownFormat (the message lists the known formats), ErrProfile.
func ParserFor(name string, opts ...Option) (Parser, error) {
	mk, ok := registry[name]
	if !ok {
		return nil, fmt.Errorf("%w %q (known: %s)", ErrUnknownFormat, name, strings.Join(Formats(), ", "))
	}
	return mk(buildOptions(opts))
}

// lineSink checks each normalized line, adds it to the summary and hands it to the caller.
type lineSink struct {
	ctx context.Context
	fn  func(StatementLine) error
	sum *Summary
	n   int
}

func newSink(ctx context.Context, fn func(StatementLine) error, format string) *lineSink {
	return &lineSink{ctx: ctx, fn: fn, sum: newSummary(format)}
}

// row is called once per detail row; it notices cancellation without a syscall per row.
func (s *lineSink) row() error {
	s.n++
	if s.n&1023 == 0 {
		return s.ctx.Err()
	}
	return nil
}

func (s *lineSink) emit(l StatementLine) error {
	if l.MerchantOrderNo == "" && l.ChannelTxnID == "" {
		return lineErrorf(l.LineNo, "neither a merchant order number nor a channel transaction id")
	}
	if !l.Status.Valid() {
		return lineErrorf(l.LineNo, "status %q is not a normalized status", l.Status)
	}
	if want := l.Status.sign(); l.AmountMinor != 0 && want != 0 && (l.AmountMinor > 0) != (want > 0) {
		return lineErrorf(l.LineNo, "%s with amount %s: a %s must be %s", l.Status,
			money.Format(l.AmountMinor, l.Currency), l.Status, map[bool]errs.Phrase{true: errs.Phrasef("positive"), false: errs.Phrasef("negative")}[want > 0])
	}
	var ok bool
	if s.sum.TotalMinor, ok = addChecked(s.sum.TotalMinor, l.AmountMinor); !ok {
		return lineErrorf(l.LineNo, "the statement total overflows int64")
	}
	cur := s.sum.ByCurrency[l.Currency]
	if s.sum.ByCurrency[l.Currency], ok = addChecked(cur, l.AmountMinor); !ok {
		return lineErrorf(l.LineNo, "the %s total overflows int64", l.Currency)
	}
	s.sum.Lines++
	return s.fn(l)
}

func addChecked(a, b int64) (int64, bool) {
	if (b > 0 && a > math.MaxInt64-b) || (b < 0 && a < math.MinInt64-b) {
		return 0, false
	}
	return a + b, true
}

// mustLoadLocation is for zone names compiled into this package (time/tzdata embeds them).
func mustLoadLocation(name string) *time.Location {
	loc, err := time.LoadLocation(name)
	if err != nil {
		panic(err)
	}
	return loc
}

// shanghai is the zone WeChat Pay and Alipay write their local times in.
var shanghai = mustLoadLocation("Asia/Shanghai")

const localTimeLayout = "2006-01-02 15:04:05"

// parseLocalTime reads a wall-clock time in loc and returns it in UTC.
func parseLocalTime(s, layout string, loc *time.Location) (time.Time, error) {
	if s == "" {
		return time.Time{}, fmt.Errorf("empty time")
	}
	t, err := time.ParseInLocation(layout, s, loc)
	if err != nil {
		return time.Time{}, fmt.Errorf("time %q does not match %q", s, layout)
	}
	return t.UTC(), nil
}
