package reconcile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/idemops/idemops/money"
	"go.yaml.in/yaml/v3"
)

// A Profile describes the CSV statement of a channel that has no parser of its own: where the
// header is, which column holds each normalized field, and how to read times, amounts and
// statuses. It is written in YAML:
//
//	name: acmepay
//	encoding: utf-8            # utf-8 (default) or gbk
//	delimiter: ","             # one character; "\t" for TAB
//	comment_prefix: "#"        # lines starting with it are ignored; empty: none
//	header_row: 1              # physical line of the header row (1-based, default 1)
//	strip_prefix: "`"          # removed from the front of every value (optional)
//	columns:                   # header names; merchant_order_no or channel_txn_id required
//	  channel_txn_id: Txn ID
//	  merchant_order_no: Order No
//	  amount: Amount
//	  currency: Currency       # or a fixed `currency:` below
//	  status: Status
//	  occurred_at: Paid At
//	currency: CNY              # when there is no currency column
//	timezone: Asia/Shanghai    # IANA zone of wall-clock times (default UTC)
//	time_layout: "2006-01-02 15:04:05"  # Go layout, or rfc3339, or unix (seconds)
//	amount_units: major        # major (12.34) or minor (1234)
//	sign: signed               # signed: the file carries the sign; unsigned: magnitudes,
//	                           # refunds and chargebacks are negated here
//	thousands_separator: ","   # optional digit grouping in amounts
//	status_map:                # file value → success|refund|failed|chargeback|
//	  PAID: success            #   chargeback_reversed|refund_reversed|skip
//	  REFUNDED: refund
//	  FEE: skip
type Profile struct {
	Name      string
	source    string
	enc       textEncoding
	comma     byte
	comment   string
	headerRow int
	strip     string
	cols      profileColumns
	currency  string
	loc       *time.Location
	layout    string
	minor     bool
	unsigned  bool
	thousands byte
	statuses  map[string]Status // the empty Status marks "skip"
}

type profileFile struct {
	Name               string            `yaml:"name"`
	Encoding           string            `yaml:"encoding"`
	Delimiter          string            `yaml:"delimiter"`
	CommentPrefix      string            `yaml:"comment_prefix"`
	HeaderRow          *int              `yaml:"header_row"`
	StripPrefix        string            `yaml:"strip_prefix"`
	Columns            profileColumns    `yaml:"columns"`
	Currency           string            `yaml:"currency"`
	Timezone           string            `yaml:"timezone"`
	TimeLayout         string            `yaml:"time_layout"`
	AmountUnits        string            `yaml:"amount_units"`
	Sign               string            `yaml:"sign"`
	ThousandsSeparator string            `yaml:"thousands_separator"`
	StatusMap          map[string]string `yaml:"status_map"`
}

type profileColumns struct {
	ChannelTxnID    string `yaml:"channel_txn_id"`
	MerchantOrderNo string `yaml:"merchant_order_no"`
	Amount          string `yaml:"amount"`
	Currency        string `yaml:"currency"`
	Status          string `yaml:"status"`
	OccurredAt      string `yaml:"occurred_at"`
}

// maxProfileBytes bounds a profile file; a real one is a few hundred bytes.
const maxProfileBytes = 64 << 10

// LoadProfile reads and validates a YAML profile file. Errors wrap ErrProfile and name the file
// and the field.
func LoadProfile(path string) (*Profile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrProfile, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxProfileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrProfile, path, err)
	}
	if len(data) > maxProfileBytes {
		return nil, fmt.Errorf("%w: %s: larger than %d bytes", ErrProfile, path, maxProfileBytes)
	}
	return ParseProfile(filepath.Base(path), data)
}

// ParseProfile validates a YAML profile; source names it in errors.
func ParseProfile(source string, data []byte) (*Profile, error) {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s: %s", ErrProfile, source, field, fmt.Sprintf(format, args...))
	}
	var pf profileFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&pf); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: %s: empty profile", ErrProfile, source)
		}
		return nil, fmt.Errorf("%w: %s: %s", ErrProfile, source, oneLineError(err))
	}
	p := &Profile{Name: strings.TrimSpace(pf.Name), source: source, comment: pf.CommentPrefix,
		strip: pf.StripPrefix, cols: pf.Columns}
	if p.Name == "" {
		return nil, bad("name", "required")
	}
	switch strings.ToLower(pf.Encoding) {
	case "", "utf-8", "utf8":
		p.enc = encodingUTF8
	case "gbk":
		p.enc = encodingGBK
	default:
		return nil, bad("encoding", "%q is not utf-8 or gbk", pf.Encoding)
	}
	switch d := pf.Delimiter; {
	case d == "":
		p.comma = ','
	case d == `\t` || d == "\t":
		p.comma = '\t'
	case len(d) == 1 && d[0] > ' ' && d[0] < 0x7f && d[0] != '"':
		p.comma = d[0]
	default:
		return nil, bad("delimiter", "%q is not one printable ASCII character or \\t", d)
	}
	p.headerRow = 1
	if pf.HeaderRow != nil {
		if *pf.HeaderRow < 1 {
			return nil, bad("header_row", "%d: lines count from 1", *pf.HeaderRow)
		}
		p.headerRow = *pf.HeaderRow
	}
	if p.comment != "" && strings.ContainsAny(p.comment, "\r\n") {
		return nil, bad("comment_prefix", "must be on one line")
	}
	c := pf.Columns
	for _, col := range []struct{ field, v string }{{"columns.amount", c.Amount},
		{"columns.status", c.Status}, {"columns.occurred_at", c.OccurredAt}} {
		if strings.TrimSpace(col.v) == "" {
			return nil, bad(col.field, "required")
		}
	}
	if strings.TrimSpace(c.ChannelTxnID) == "" && strings.TrimSpace(c.MerchantOrderNo) == "" {
		return nil, bad("columns.merchant_order_no", "required (or columns.channel_txn_id)")
	}
	switch {
	case c.Currency == "" && pf.Currency == "":
		return nil, bad("currency", "required when there is no columns.currency")
	case c.Currency != "" && pf.Currency != "":
		return nil, bad("currency", "set either currency or columns.currency, not both")
	case pf.Currency != "":
		cur, err := money.Normalize(pf.Currency)
		if err != nil {
			return nil, bad("currency", "%v", err)
		}
		p.currency = cur
	}
	p.loc = time.UTC
	if pf.Timezone != "" {
		loc, err := time.LoadLocation(pf.Timezone)
		if err != nil || pf.Timezone == "Local" {
			return nil, bad("timezone", "%q is not an IANA time zone", pf.Timezone)
		}
		p.loc = loc
	}
	p.layout = pf.TimeLayout
	switch strings.ToLower(p.layout) {
	case "":
		p.layout = localTimeLayout
	case "rfc3339", "unix":
		p.layout = strings.ToLower(p.layout)
	default:
		if !layoutHasDate(p.layout) {
			return nil, bad("time_layout", "%q does not read back a date (use a Go layout like 2006-01-02 15:04:05)", p.layout)
		}
	}
	switch pf.AmountUnits {
	case "", "major":
	case "minor":
		p.minor = true
	default:
		return nil, bad("amount_units", "%q is not major or minor", pf.AmountUnits)
	}
	switch pf.Sign {
	case "", "signed":
	case "unsigned":
		p.unsigned = true
	default:
		return nil, bad("sign", "%q is not signed or unsigned", pf.Sign)
	}
	switch s := pf.ThousandsSeparator; {
	case s == "":
	case len(s) == 1 && s[0] != '.' && (s[0] == ',' || s[0] == ' ' || s[0] == '\'' || s[0] == '_'):
		if s[0] == p.comma {
			return nil, bad("thousands_separator", "%q is also the delimiter", s)
		}
		p.thousands = s[0]
	default:
		return nil, bad("thousands_separator", "%q is not one of , ' _ or space", s)
	}
	if len(pf.StatusMap) == 0 {
		return nil, bad("status_map", "required: map each status value of the file to %s or skip", statusNames())
	}
	p.statuses = make(map[string]Status, len(pf.StatusMap))
	keys := make([]string, 0, len(pf.StatusMap))
	for k := range pf.StatusMap {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := pf.StatusMap[k]
		if v == "skip" {
			p.statuses[strings.TrimSpace(k)] = ""
			continue
		}
		st := Status(v)
		if !st.Valid() {
			return nil, bad("status_map."+k, "%q is not one of %s or skip", v, statusNames())
		}
		p.statuses[strings.TrimSpace(k)] = st
	}
	return p, nil
}

func statusNames() string {
	names := make([]string, len(statuses))
	for i, s := range statuses {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// layoutHasDate reports whether a Go time layout round-trips a date: a layout without year,
// month or day tokens would read every cell as the zero time.
func layoutHasDate(layout string) bool {
	ref := time.Date(2023, 4, 5, 6, 7, 8, 0, time.UTC)
	t, err := time.Parse(layout, ref.Format(layout))
	return err == nil && t.Year() == 2023 && t.Month() == 4 && t.Day() == 5
}

func oneLineError(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// profileParser reads a statement with a Profile.
type profileParser struct{ opts options }

func (profileParser) Format() string { return FormatProfile }

func (pp profileParser) Parse(ctx context.Context, r io.Reader, fn func(StatementLine) error) (*Summary, error) {
	p := pp.opts.profile
	cfg := readerConfig{encoding: p.enc, comma: p.comma, comment: p.comment}
	sum, err := parseFlat(ctx, r, fn, FormatProfile, pp.opts, cfg, p.headerRow, p.bind)
	if sum != nil {
		sum.Format = FormatProfile + ":" + p.Name
	}
	return sum, err
}

func (p *Profile) bind(h *header) (rowReader, error) {
	cs := columnSet{h: h}
	amount := cs.need(p.cols.Amount)
	status := cs.need(p.cols.Status)
	at := cs.need(p.cols.OccurredAt)
	txn, order, currency := -1, -1, -1
	if p.cols.ChannelTxnID != "" {
		txn = cs.need(p.cols.ChannelTxnID)
	}
	if p.cols.MerchantOrderNo != "" {
		order = cs.need(p.cols.MerchantOrderNo)
	}
	if p.cols.Currency != "" {
		currency = cs.need(p.cols.Currency)
	}
	if cs.err != nil {
		return nil, cs.err
	}
	value := func(f []string, i int) string {
		if i < 0 {
			return ""
		}
		return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(f[i]), p.strip))
	}
	return func(rec record) (StatementLine, string, error) {
		f := rec.fields
		var l StatementLine
		sv := value(f, status)
		st, known := p.statuses[sv]
		if !known {
			return l, "", lineErrorf(rec.line, "%s: value %q is not in the profile's status_map", h.names[status], sv)
		}
		if st == "" {
			return l, sv, nil
		}
		l.Status = st
		l.ChannelTxnID = value(f, txn)
		l.MerchantOrderNo = value(f, order)
		l.Currency = p.currency
		var err error
		if currency >= 0 {
			if l.Currency, err = money.Normalize(value(f, currency)); err != nil {
				return l, "", lineErrorf(rec.line, "%s: %v", h.names[currency], err)
			}
		}
		scale, _ := money.Exponent(l.Currency)
		if p.minor {
			scale = 0
		}
		if l.AmountMinor, err = money.ParseScaled(value(f, amount), scale, p.thousands); err != nil {
			return l, "", lineErrorf(rec.line, "%s: %v", h.names[amount], err)
		}
		if p.unsigned && st.sign() != 0 {
			if l.AmountMinor < 0 {
				return l, "", lineErrorf(rec.line, "%s: negative amount in a profile with sign: unsigned", h.names[amount])
			}
			l.AmountMinor *= int64(st.sign())
		}
		if l.OccurredAt, err = p.parseTime(value(f, at)); err != nil {
			return l, "", lineErrorf(rec.line, "%s: %v", h.names[at], err)
		}
		return l, "", nil
	}, nil
}

func (p *Profile) parseTime(s string) (time.Time, error) {
	switch p.layout {
	case "rfc3339":
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			return time.Time{}, fmt.Errorf("time %q is not RFC 3339", s)
		}
		return t.UTC(), nil
	case "unix":
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil || sec < 0 || sec > 1<<37 {
			return time.Time{}, fmt.Errorf("time %q is not unix seconds", s)
		}
		return time.Unix(sec, 0).UTC(), nil
	}
	return parseLocalTime(s, p.layout, p.loc)
}
