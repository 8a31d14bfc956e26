package downstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"strings"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/downstream/paysim"
)

// PaymentCharge is the name of the paysim charge operation.
const PaymentCharge = "payment.charge"

// PaysimCharge is the "payment.charge" operation against paysim: it charges amount_minor in
// currency to payee, with the lease's downstream key as both the Idempotency-Key and the
// merchant order number, so a statement line matches the key it came from.
type PaysimCharge struct {
	Client *paysim.Client
	// ApplyFunc, when set, replaces the default Apply (a 201 JSONSnapshot of the charge id and
	// status) — the demo writes its payments row here.
	ApplyFunc ApplyFunc
	// DeclinedSnapshot, when set, builds the response replayed for a declined charge (default:
	// 402 with {"resource_id", "status": "failed"}).
	DeclinedSnapshot func(ch *paysim.Charge) *claim.Snapshot
	// Routes, when set, say which channel account a charge goes through: Execute charges there
	// and Execute and Lookup tell the key (claim.Lease.ChannelAccount), so that reconciliation
	// matches each channel's statement against its own charges only. Unset: charges of no
	// channel in particular, keys without an account.
	Routes *ChannelRoutes
}

// ChannelRoute is one channel account a service charges through: Account is its name in
// reconciliation (the channel account), Channel paysim's channel (wechat, alipay, stripe,
// adyen).
type ChannelRoute struct {
	Account string
	Channel string
}

// ChannelRoutes route charges to channel accounts by currency, the way a merchant's payment
// page offers wallets by currency: a currency's charges go to one of its routes, picked by the
// downstream key (so every attempt of a key goes to the same account), and a currency without
// routes to one of Default's.
type ChannelRoutes struct {
	ByCurrency map[string][]ChannelRoute
	Default    []ChannelRoute
}

// For is the route of a charge in currency under downstreamKey; ok false when there is none.
func (r *ChannelRoutes) For(currency, downstreamKey string) (ChannelRoute, bool) {
	if r == nil {
		return ChannelRoute{}, false
	}
	routes := r.ByCurrency[strings.ToUpper(currency)]
	if len(routes) == 0 {
		routes = r.Default
	}
	if len(routes) == 0 {
		return ChannelRoute{}, false
	}
	h := fnv.New32a()
	h.Write([]byte(downstreamKey))
	return routes[h.Sum32()%uint32(len(routes))], true
}

// Account is the account the routes know paysim's channel by ("" when none does): a lookup
// says where a charge really went, whatever the routes would pick today.
func (r *ChannelRoutes) Account(channel string) string {
	if r == nil || channel == "" {
		return ""
	}
	for _, routes := range r.ByCurrency {
		for _, rt := range routes {
			if rt.Channel == channel {
				return rt.Account
			}
		}
	}
	for _, rt := range r.Default {
		if rt.Channel == channel {
			return rt.Account
		}
	}
	return ""
}

var _ claim.Operation = (*PaysimCharge)(nil)

// NewPaysimCharge returns the operation on client.
func NewPaysimCharge(client *paysim.Client) *PaysimCharge { return &PaysimCharge{Client: client} }

// Name is "payment.charge".
func (p *PaysimCharge) Name() string { return PaymentCharge }

// Intent: everything but description and client_ts carries intent; the amount and currency
// are recorded on the key. Amount, currency, payee and merchant order number are not sensitive:
// the console's key page shows them without the reveal step.
func (p *PaysimCharge) Intent() claim.IntentSpec {
	return claim.IntentSpec{
		Ignore:        []string{"description", "client_ts"},
		AmountField:   "amount_minor",
		CurrencyField: "currency",
		Summary:       []string{"amount_minor", "currency", "payee", "merchant_order_no"},
	}
}

// chargeIntent is what Execute reads from the lease's canonical intent (the amount and
// currency come from the lease itself).
type chargeIntent struct {
	Payee string `json:"payee"`
	// MerchantOrderNo is the service's own order number; it travels as the charge description
	// (the channel's merchant_order_no is the downstream key).
	MerchantOrderNo string `json:"merchant_order_no"`
}

// Execute posts the charge. A declined charge is a Document with a final Failure; 4xx answers
// are final failures; 5xx and transport errors are ambiguous (plain errors).
func (p *PaysimCharge) Execute(ctx context.Context, l *claim.Lease) (*claim.Document, error) {
	if l.Amount == nil || l.Currency == "" {
		return nil, claim.FinalFailure("invalid_intent", "the request has no amount_minor or currency", nil)
	}
	var in chargeIntent
	if err := json.Unmarshal(l.Intent, &in); err != nil {
		return nil, claim.FinalFailure("invalid_intent", "payee and merchant_order_no must be strings", nil)
	}
	req := paysim.ChargeRequest{AmountMinor: *l.Amount, Currency: l.Currency, MerchantOrderNo: l.DownstreamKey,
		Payee: in.Payee}
	if rt, ok := p.Routes.For(l.Currency, l.DownstreamKey); ok {
		// Told before the call: a charge whose answer is lost is still recorded where it went.
		req.Channel, l.ChannelAccount = rt.Channel, rt.Account
	}
	if in.MerchantOrderNo != "" {
		req.Description = "order " + truncate(in.MerchantOrderNo, 200)
	}
	fault, _ := ctx.Value(faultKey{}).(string)
	ch, err := p.Client.CreateCharge(ctx, l.DownstreamKey, req, fault)
	switch {
	case errors.Is(err, paysim.ErrKeyReused):
		return nil, claim.FinalFailure("downstream_key_conflict",
			"paysim holds a different charge under this downstream key", nil)
	case errors.Is(err, paysim.ErrRejected):
		return nil, claim.FinalFailure("charge_rejected", rejection(err),
			JSONSnapshot(http.StatusBadRequest, "", "rejected"))
	case err != nil:
		return nil, fmt.Errorf("%s execute: %w", PaymentCharge, err)
	}
	return p.document(ch)
}

type faultKey struct{}

// WithPaysimFault makes Execute ask paysim for a fault (X-Paysim-Fault: drop-response, error,
// latency=…): for demo traffic and tests that need a charge committed at the channel with the
// answer lost.
func WithPaysimFault(ctx context.Context, fault string) context.Context {
	return context.WithValue(ctx, faultKey{}, fault)
}

// Lookup GETs the charge under the downstream key: 404 → (nil, nil); 5xx or transport errors
// → an error (downstream could not answer).
func (p *PaysimCharge) Lookup(ctx context.Context, l *claim.Lease) (*claim.Document, error) {
	ch, err := p.Client.GetCharge(ctx, l.DownstreamKey)
	switch {
	case errors.Is(err, paysim.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("%s lookup: %w", PaymentCharge, err)
	}
	if account := p.Routes.Account(ch.Channel); account != "" {
		l.ChannelAccount = account
	}
	return p.document(ch)
}

// Apply runs ApplyFunc, or answers 201 with {"resource_id": charge id, "status": "succeeded"}.
func (p *PaysimCharge) Apply(ctx context.Context, tx *gorm.DB, l *claim.Lease, doc *claim.Document) (*claim.Snapshot, error) {
	if p.ApplyFunc != nil {
		return p.ApplyFunc(ctx, tx, l, doc)
	}
	ch, err := ChargeOf(doc)
	if err != nil {
		return nil, err
	}
	return JSONSnapshot(defaultApplyStatus, ch.ID, ch.Status), nil
}

func (p *PaysimCharge) document(ch *paysim.Charge) (*claim.Document, error) {
	body, err := json.Marshal(ch)
	if err != nil {
		return nil, err
	}
	doc := &claim.Document{ResourceID: ch.ID, Body: body}
	if ch.Status == paysim.StatusFailed {
		snap := JSONSnapshot(http.StatusPaymentRequired, ch.ID, ch.Status)
		if p.DeclinedSnapshot != nil {
			snap = p.DeclinedSnapshot(ch)
		}
		doc.Failure = claim.FinalFailure("declined", "the channel declined the charge ("+ch.FailureCode+")", snap)
	}
	return doc, nil
}

// ChargeOf decodes the paysim charge a PaysimCharge document carries (for ApplyFuncs).
func ChargeOf(doc *claim.Document) (*paysim.Charge, error) {
	var ch paysim.Charge
	if err := json.Unmarshal(doc.Body, &ch); err != nil {
		return nil, fmt.Errorf("%s: decode charge: %w", PaymentCharge, err)
	}
	return &ch, nil
}

// rejection is paysim's one-line reason (it names the field, never echoes values).
func rejection(err error) string {
	var ae *paysim.APIError
	if errors.As(err, &ae) {
		return ae.Message
	}
	return err.Error()
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
