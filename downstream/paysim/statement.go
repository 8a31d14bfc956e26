package paysim

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/idemops/idemops/errs"
)

// Format names a statement layout.
type Format string

// The statement layouts paysim exports; see the package doc for each.
const (
	FormatWechat Format = "wechat"
	FormatAlipay Format = "alipay"
	FormatStripe Format = "stripe"
	FormatAdyen  Format = "adyen"
)

// Formats lists every layout, in a fixed order.
var Formats = []Format{FormatWechat, FormatAlipay, FormatStripe, FormatAdyen}

// ErrUnknownFormat: a statement format paysim does not export.
var ErrUnknownFormat = errs.New(errs.Invalid, "unknown statement format")

// ErrBadDate: a statement date that is not YYYY-MM-DD.
var ErrBadDate = errs.New(errs.Invalid, "statement date must be YYYY-MM-DD")

// Shanghai is China Standard Time: UTC+8 all year (no daylight saving since 1991), so a fixed
// zone is exact and needs no tz database.
var Shanghai = time.FixedZone("CST", 8*60*60)

// Location is the time zone in which a statement date of format f is a day: Asia/Shanghai for
// WeChat Pay and Alipay, UTC for Stripe and Adyen.
func (f Format) Location() *time.Location {
	if f == FormatWechat || f == FormatAlipay {
		return Shanghai
	}
	return time.UTC
}

// ContentType is the statement's media type, with its charset.
func (f Format) ContentType() string {
	if f == FormatAlipay {
		return "text/csv; charset=GBK"
	}
	return "text/csv; charset=utf-8"
}

// ParseFormat accepts the names in Formats.
func ParseFormat(s string) (Format, error) {
	for _, f := range Formats {
		if string(f) == s {
			return f, nil
		}
	}
	return "", fmt.Errorf("%w %q (want wechat, alipay, stripe or adyen)", ErrUnknownFormat, s)
}

// entry is one statement line: a succeeded charge, or a refund of one.
type entry struct {
	at     time.Time // in the format's zone
	charge Charge    // for a refund: the refunded charge as the channel holds it now
	refund *Refund
}

// day is one channel day: [start, end) in the format's zone.
type day struct {
	date       string
	start, end time.Time
}

// Statement renders the statement of format f for date (YYYY-MM-DD, a day in f's zone).
func (s *Server) Statement(date string, f Format) ([]byte, error) {
	start, err := time.ParseInLocation("2006-01-02", date, f.Location())
	if err != nil {
		return nil, fmt.Errorf("%w, got %q", ErrBadDate, date)
	}
	d := day{date: date, start: start, end: start.AddDate(0, 0, 1)}
	entries := s.entries(d, f)
	switch f {
	case FormatWechat:
		return s.wechatBill(entries)
	case FormatAlipay:
		return s.alipayDetail(d, entries)
	case FormatStripe:
		return s.stripeItemized(d, entries)
	case FormatAdyen:
		return s.adyenSettlement(d, entries)
	}
	return nil, fmt.Errorf("%w %q", ErrUnknownFormat, f)
}

// entries collects the day's succeeded charges and refunds in time order (creation order on
// ties). A charge made through a channel is listed on that channel's statements only (a refund
// on its charge's); one of no channel in particular on every statement that takes its currency:
// the WeChat and Alipay bills are domestic, CNY only.
func (s *Server) entries(d day, f Format) []entry {
	domestic := f == FormatWechat || f == FormatAlipay
	in := func(t time.Time, c Charge, currency string) bool {
		if !(!t.Before(d.start) && t.Before(d.end)) {
			return false
		}
		if c.Channel != "" {
			return c.Channel == string(f)
		}
		return !domestic || currency == "CNY"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []entry
	for _, c := range s.st.Charges {
		if c.Status == StatusSucceeded && in(c.CreatedAt, c.Charge, c.Currency) {
			out = append(out, entry{at: c.CreatedAt.In(f.Location()), charge: c.Charge})
		}
	}
	for _, r := range s.st.Refunds {
		c, ok := s.st.byID[r.ChargeID]
		if ok && in(r.CreatedAt, c.Charge, r.Currency) {
			rf := r.Refund
			out = append(out, entry{at: r.CreatedAt.In(f.Location()), charge: c.Charge, refund: &rf})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].at.Before(out[j].at) })
	return out
}

// getStatement handles GET /statements/{date}?format=….
func (s *Server) getStatement(w http.ResponseWriter, r *http.Request) {
	f, err := ParseFormat(r.URL.Query().Get("format"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", "format: "+err.Error())
		return
	}
	b, err := s.Statement(r.PathValue("date"), f)
	switch {
	case errors.Is(err, ErrBadDate):
		writeError(w, http.StatusBadRequest, "invalid_request", "date: "+err.Error())
		return
	case err != nil:
		writeError(w, http.StatusInternalServerError, "internal", err.Error())
		return
	}
	if strings.EqualFold(r.URL.Query().Get("tar_type"), "GZIP") {
		// WeChat Pay's bill download with tar_type=GZIP: the same text, gzip-compressed.
		if b, err = gzipped(b); err != nil {
			writeError(w, http.StatusInternalServerError, "internal", err.Error())
			return
		}
		w.Header().Set("Content-Type", "application/x-gzip")
		w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="paysim_%s_%s.csv.gz"`, f, r.PathValue("date")))
		w.Write(b)
		return
	}
	w.Header().Set("Content-Type", f.ContentType())
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="paysim_%s_%s.csv"`, f, r.PathValue("date")))
	w.Write(b)
}

const stampLayout = "2006-01-02 15:04:05"

// csvRows renders records with encoding/csv (quoting only where a value needs it).
func csvRows(buf *bytes.Buffer, rows [][]string) error {
	cw := csv.NewWriter(buf)
	if err := cw.WriteAll(rows); err != nil {
		return err
	}
	return cw.Error()
}

// fee is the channel's fee on a statement entry: refunds return none.
func (s *Server) fee(e entry) int64 {
	if e.refund != nil {
		return 0
	}
	return feeMinor(e.charge.AmountMinor, s.cfg.FeeBasisPoints)
}
