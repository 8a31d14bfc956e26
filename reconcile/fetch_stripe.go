package reconcile

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v82"

	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/money"
)

// Stripe, through stripe-go: the statement of a bill date (a UTC day) is every balance
// transaction of each payout that arrives that day — with the payout itself, so the parser's
// settlement check holds — and the day's transactions no payout holds yet (pending ones). They
// are written as the itemized payout reconciliation report (payout_reconciliation.itemized.5)
// the "stripe" format reads: the order number from the charge's metadata order_no (a refund's
// own metadata, else its charge's), the refund number from the refund's metadata refund_no.
// The secret key authenticates (Bearer); Stripe signs nothing, TLS is the answer's proof.

type stripeFetcher struct{ r *Reconciler }

func (stripeFetcher) Name() string { return FetcherStripe }

// stripeMaxTransactions bounds one statement's balance transactions (pages of 100).
const stripeMaxTransactions = 1_000_000

// stripeReportHeader is the subset of payout_reconciliation.itemized.5 the stripe format reads.
var stripeReportHeader = []string{"balance_transaction_id", "created_utc", "available_on_utc", "currency", "gross", "fee", "net",
	"reporting_category", "source_id", "description", "automatic_payout_id", "automatic_payout_effective_at_utc",
	"charge_id", "payment_intent_id", "payment_metadata[order_no]", "refund_metadata[refund_no]"}

func (f stripeFetcher) Fetch(ctx context.Context, req FetchRequest) (*Fetched, error) {
	r := f.r
	key, _, err := r.credential(ctx, req.Account.Channel, CredSecretKey)
	if err != nil {
		return nil, err
	}
	base := req.Account.Settings.apiBase(KindStripe)
	u, err := url.Parse(base)
	if err != nil || u.Host == "" {
		return nil, errs.Errorf("%w: the account's Stripe API base is not a URL", ErrFetch)
	}
	if err := r.sources.allowURL(u); err != nil {
		return nil, r.readError(originOf(base), err)
	}
	day, err := time.ParseInLocation(time.DateOnly, req.BillDate, time.UTC)
	if err != nil {
		return nil, invalidf("date", "%q is not YYYY-MM-DD", req.BillDate)
	}
	zero := int64(0)
	sc := stripe.NewClient(strings.TrimSpace(string(key)), stripe.WithBackends(stripe.NewBackendsWithConfig(&stripe.BackendConfig{
		URL: stripe.String(base), HTTPClient: r.http, MaxNetworkRetries: &zero,
		LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull}})))
	s := &stripeStatement{r: r, sc: sc, seen: map[string]bool{}, orders: map[string]string{}}
	if err := s.collect(ctx, day); err != nil {
		return nil, f.refusal(err)
	}
	out, err := r.writeTemp(func(w io.Writer) error {
		cw := csv.NewWriter(w)
		_ = cw.Write(stripeReportHeader)
		for _, row := range s.rows {
			_ = cw.Write(row)
		}
		cw.Flush()
		return cw.Error()
	})
	if err != nil {
		return nil, err
	}
	out.Note = fmt.Sprintf("%d payouts, %d balance transactions", s.payouts, len(s.rows))
	return out, nil
}

// refusal is the one line for a Stripe API error: the status and Stripe's code, never its
// message (an invalid key's message quotes part of the key).
func (f stripeFetcher) refusal(err error) error {
	var se *stripe.Error
	if !errors.As(err, &se) {
		if errors.Is(err, ErrFetch) || errors.Is(err, ErrNotReady) || errors.Is(err, ErrTooLarge) {
			return err
		}
		return f.r.readError("Stripe API", err)
	}
	what := strings.TrimSpace(string(se.Type) + " " + string(se.Code))
	switch {
	case se.HTTPStatusCode == 401:
		return errs.Errorf("%w: Stripe refused the secret key (HTTP 401 %s)", ErrFetch, what)
	case se.HTTPStatusCode == 429 || se.HTTPStatusCode >= 500 || se.HTTPStatusCode == 0:
		if se.HTTPStatusCode == 0 && se.Err != nil {
			return f.r.readError("Stripe API", se.Err)
		}
		return errs.Errorf("%w: the source could not be read: HTTP %d (Stripe API %s)", ErrNotReady, se.HTTPStatusCode, what)
	}
	return errs.Errorf("%w: Stripe refused the request: HTTP %d %s", ErrFetch, se.HTTPStatusCode, what)
}

// stripeStatement collects one day's rows.
type stripeStatement struct {
	r       *Reconciler
	sc      *stripe.Client
	rows    [][]string
	seen    map[string]bool   // balance transactions already written
	orders  map[string]string // charge id → order number, for refunds
	payouts int
	n       int
}

func (s *stripeStatement) collect(ctx context.Context, day time.Time) error {
	start, end := day.Unix(), day.AddDate(0, 0, 1).Unix()
	pp := &stripe.PayoutListParams{ArrivalDateRange: &stripe.RangeQueryParams{GreaterThanOrEqual: start, LesserThan: end}}
	pp.Limit = stripe.Int64(100)
	pp.Context = ctx
	var payouts []*stripe.Payout
	for po, err := range s.sc.V1Payouts.List(ctx, pp) {
		if err != nil {
			return err
		}
		if len(payouts) >= 1000 {
			return errs.Errorf("%w: more than 1000 payouts arrive on one day", ErrTooLarge)
		}
		payouts = append(payouts, po)
	}
	for _, po := range payouts {
		s.payouts++
		params := &stripe.BalanceTransactionListParams{Payout: stripe.String(po.ID)}
		if err := s.list(ctx, params, po); err != nil {
			return err
		}
	}
	// The day's transactions no payout of the day holds: pending, or paid out on a later day.
	params := &stripe.BalanceTransactionListParams{CreatedRange: &stripe.RangeQueryParams{GreaterThanOrEqual: start, LesserThan: end}}
	return s.list(ctx, params, nil)
}

// list writes the rows of the balance transactions params selects; po is the payout they
// belong to (nil for the day's pending ones, of which payout rows are skipped: they belong to
// their arrival day).
func (s *stripeStatement) list(ctx context.Context, params *stripe.BalanceTransactionListParams, po *stripe.Payout) error {
	params.Limit = stripe.Int64(100)
	params.AddExpand("data.source")
	params.Context = ctx
	for bt, err := range s.sc.V1BalanceTransactions.List(ctx, params) {
		if err != nil {
			return err
		}
		if s.seen[bt.ID] || (po == nil && bt.Type == stripe.BalanceTransactionTypePayout) {
			continue
		}
		if s.n++; s.n > stripeMaxTransactions {
			return errs.Errorf("%w: more than %d balance transactions on one day", ErrTooLarge, stripeMaxTransactions)
		}
		s.seen[bt.ID] = true
		row, err := s.row(ctx, bt, po)
		if err != nil {
			return err
		}
		s.rows = append(s.rows, row)
	}
	return nil
}

func stripeTime(unix int64) string {
	if unix == 0 {
		return ""
	}
	return time.Unix(unix, 0).UTC().Format(time.DateTime)
}

// row writes one balance transaction as the report does.
func (s *stripeStatement) row(ctx context.Context, bt *stripe.BalanceTransaction, po *stripe.Payout) ([]string, error) {
	cur := strings.ToUpper(string(bt.Currency))
	if _, ok := money.Exponent(cur); !ok {
		return nil, errs.Errorf("%w: Stripe balance transaction %s is in an unknown currency %q", ErrFetch, truncateName(bt.ID), truncateName(cur))
	}
	var payoutID, payoutAt string
	if po != nil {
		payoutID, payoutAt = po.ID, stripeTime(po.ArrivalDate)
	}
	var sourceID, chargeID, intentID, orderNo, refundNo string
	if src := bt.Source; src != nil {
		sourceID = src.ID
		switch {
		case src.Charge != nil:
			c := src.Charge
			chargeID, orderNo = c.ID, c.Metadata["order_no"]
			if c.PaymentIntent != nil {
				intentID = c.PaymentIntent.ID
			}
		case src.Refund != nil:
			rf := src.Refund
			refundNo, orderNo = rf.Metadata["refund_no"], rf.Metadata["order_no"]
			if rf.Charge != nil {
				chargeID = rf.Charge.ID
			}
			if rf.PaymentIntent != nil {
				intentID = rf.PaymentIntent.ID
			}
			if orderNo == "" && chargeID != "" {
				var err error
				if orderNo, err = s.chargeOrder(ctx, chargeID); err != nil {
					return nil, err
				}
			}
		case src.Payout != nil && bt.Type == stripe.BalanceTransactionTypePayout:
			payoutID = src.ID
			if payoutAt == "" {
				payoutAt = stripeTime(src.Payout.ArrivalDate)
			}
		}
	}
	return []string{bt.ID, stripeTime(bt.Created), stripeTime(bt.AvailableOn), strings.ToLower(cur),
		money.Format(bt.Amount, cur), money.Format(bt.Fee, cur), money.Format(bt.Net, cur), string(bt.ReportingCategory),
		sourceID, bt.Description, payoutID, payoutAt, chargeID, intentID, orderNo, refundNo}, nil
}

// chargeOrder is a charge's order number, looked up once per charge (for refunds whose own
// metadata does not carry it).
func (s *stripeStatement) chargeOrder(ctx context.Context, id string) (string, error) {
	if o, ok := s.orders[id]; ok {
		return o, nil
	}
	if len(s.orders) >= 10000 {
		return "", errs.Errorf("%w: more than 10000 refunded charges to look up on one day", ErrTooLarge)
	}
	c, err := s.sc.V1Charges.Retrieve(ctx, id, nil)
	if err != nil {
		return "", err
	}
	s.orders[id] = c.Metadata["order_no"]
	return s.orders[id], nil
}
