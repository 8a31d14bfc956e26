package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/console"
	"github.com/idemops/idemops/downstream/paysim"
	"github.com/idemops/idemops/errs"
)

// OrderStatus is a demo order's state. Channel callbacks move it, only along
// pending → paid, pending → closed and paid → refunded.
type OrderStatus string

// Order states.
const (
	OrderPending  OrderStatus = "pending"
	OrderPaid     OrderStatus = "paid"
	OrderClosed   OrderStatus = "closed"
	OrderRefunded OrderStatus = "refunded"
)

// OperationOrderPaid is the outbox event the paid transition stages (same transaction), for a
// consumer such as fulfillment.
const OperationOrderPaid = "order.paid"

// Callback outcomes, as recorded in demo_order_transitions.
const (
	OutcomeApplied   = "applied"   // the transition happened
	OutcomeDuplicate = "duplicate" // the order is already where this event leads
	OutcomeIgnored   = "ignored"   // the event can never apply (a late close after paid)
	OutcomeNotYet    = "not_yet"   // its precondition may still come (a refund before paid)
)

// transitions is the state machine: the event type → (from, to).
var transitions = map[string]struct{ from, to OrderStatus }{
	paysim.EventSucceeded: {OrderPending, OrderPaid},
	paysim.EventClosed:    {OrderPending, OrderClosed},
	paysim.EventRefunded:  {OrderPaid, OrderRefunded},
}

// ErrOrderUnknown: no order has the callback's merchant order number (yet — the callback may
// have overtaken the commit of the payment that opens it), so it is not acknowledged.
var ErrOrderUnknown = errors.New("no order with this merchant order number")

// ErrNotYet: the event's precondition has not happened yet (a refund before the payment), so
// it is not acknowledged and the channel sends it again.
var ErrNotYet = errors.New("the order is not yet in the state this event needs")

// OpenOrder records the pending order of a charge the channel accepted, in tx (the transaction
// that completes the payment key). The order waits for the channel's callback to become paid.
func OpenOrder(ctx context.Context, tx *gorm.DB, l *claim.Lease, paymentID string) error {
	var amount int64
	if l.Amount != nil {
		amount = *l.Amount
	}
	err := tx.WithContext(ctx).Exec(`INSERT INTO demo_orders (merchant_order_no, tenant, key_id, payment_id, amount_minor, currency, status)
		VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (merchant_order_no) DO NOTHING`,
		l.DownstreamKey, l.Tenant, l.KeyID, paymentID, amount, l.Currency, string(OrderPending)).Error
	if err != nil {
		return fmt.Errorf("open order: %w", err)
	}
	return nil
}

// applyPaymentAndOpenOrder is the charge's Apply in the demo world: the payments row, the
// receipt and the pending order commit with the key.
func applyPaymentAndOpenOrder(ctx context.Context, tx *gorm.DB, l *claim.Lease, doc *claim.Document) (*claim.Snapshot, error) {
	snap, err := ApplyPayment(ctx, tx, l, doc)
	if err != nil {
		return nil, err
	}
	return snap, OpenOrder(ctx, tx, l, snap.ResourceID)
}

// Order is a demo order and its recorded transitions.
type Order struct {
	MerchantOrderNo string
	Tenant          string
	PaymentID       string
	AmountMinor     int64
	Currency        string
	Status          OrderStatus
}

// CallbackResult is what one callback did to its order.
type CallbackResult struct {
	Outcome  string
	From, To OrderStatus
	Tenant   string
}

// Orders is the demo's order state machine.
type Orders struct {
	DB *gorm.DB
	// PublishPaid stages an order.paid outbox event in the paid transition's transaction. Off
	// until the world registers an outbox sender for it (the relay fails rows it cannot send).
	PublishPaid bool
}

// HandleCallback moves the order named by ev through the state machine in one transaction:
// one guarded UPDATE … WHERE status = <from>; on zero rows the order's current status decides —
// already at (or past) the target: a duplicate, acknowledged; a state the event can never
// leave from (closed after paid): ignored, acknowledged, nothing changes; the precondition may
// still come (refunded while pending): ErrNotYet, not acknowledged. paid credits the tenant's
// balance and (PublishPaid) stages order.paid in the outbox; refunded debits the balance, guarded so it
// never goes below zero. Every callback's outcome is recorded.
func (m *Orders) HandleCallback(ctx context.Context, ev paysim.CallbackEvent) (CallbackResult, error) {
	tr, ok := transitions[ev.Type]
	if !ok {
		return CallbackResult{}, fmt.Errorf("event type %q: unknown", ev.Type)
	}
	var res CallbackResult
	err := m.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var o []Order
		if err := tx.Raw(`SELECT merchant_order_no, tenant, payment_id, amount_minor, currency, status
			FROM demo_orders WHERE merchant_order_no = ?`, ev.MerchantOrderNo).Scan(&o).Error; err != nil {
			return err
		}
		if len(o) == 0 {
			return ErrOrderUnknown
		}
		order := o[0]
		res = CallbackResult{From: tr.from, To: tr.to, Outcome: OutcomeApplied, Tenant: order.Tenant}
		err := claim.Transition[OrderStatus]{Table: "demo_orders", IDColumn: "merchant_order_no", ID: ev.MerchantOrderNo,
			From: tr.from, To: tr.to, Set: map[string]any{"updated_at": gorm.Expr("now()")}}.Apply(ctx, tx)
		var gc *claim.GuardConflict
		switch {
		case err == nil:
			if err := m.settle(ctx, tx, order, tr.to); err != nil {
				return err
			}
		case errors.As(err, &gc) && !gc.Missing:
			cur := OrderStatus(gc.State)
			res.From, res.To = cur, cur
			res.Outcome = zeroRowOutcome(tr.to, cur)
		default:
			return err
		}
		if err := tx.Exec(`INSERT INTO demo_order_transitions (merchant_order_no, tenant, event_id, event_type, from_status, to_status, outcome)
			VALUES (?, ?, ?, ?, ?, ?, ?)`, ev.MerchantOrderNo, order.Tenant, ev.ID, ev.Type, string(res.From), string(res.To), res.Outcome).Error; err != nil {
			return fmt.Errorf("record transition: %w", err)
		}
		return nil
	})
	if err == nil && res.Outcome == OutcomeNotYet {
		err = ErrNotYet
	}
	return res, err
}

// zeroRowOutcome reads the current status after a transition to target found zero rows.
func zeroRowOutcome(target, cur OrderStatus) string {
	switch {
	case cur == target, target == OrderPaid && cur == OrderRefunded:
		return OutcomeDuplicate
	case target == OrderRefunded && cur == OrderPending:
		return OutcomeNotYet
	}
	return OutcomeIgnored // closed after paid or refunded; paid or refunded after closed
}

// settleBalance applies a transition's money: paid credits the tenant's balance in the order's
// currency and stages order.paid (PublishPaid); refunded debits it. Both are version-guarded updates (a
// concurrent change to the same balance makes one re-read and try again, at most 8 times);
// the debit also guards balance >= amount.
func (m *Orders) settle(ctx context.Context, tx *gorm.DB, o Order, to OrderStatus) error {
	var delta int64
	switch to {
	case OrderPaid:
		delta = o.AmountMinor
		if !m.PublishPaid {
			break
		}
		payload, _ := json.Marshal(map[string]any{"merchant_order_no": o.MerchantOrderNo, "payment_id": o.PaymentID,
			"tenant": o.Tenant, "amount_minor": o.AmountMinor, "currency": o.Currency})
		if err := claim.Enqueue(ctx, tx, claim.OutboxMessage{Operation: OperationOrderPaid,
			DownstreamKey: "order.paid:" + o.MerchantOrderNo, Payload: payload}); err != nil {
			return err
		}
	case OrderRefunded:
		delta = -o.AmountMinor
	default:
		return nil
	}
	return MoveBalance(ctx, tx, o.Tenant, o.Currency, delta)
}

// ErrInsufficientBalance: a debit larger than the balance.
var ErrInsufficientBalance = errors.New("insufficient balance")

// MoveBalance adds delta (negative: a debit) to the tenant's balance in currency, in tx, with
// VersionedUpdate: WHERE version = <read> (and, for a debit, AND balance_minor >= amount).
func MoveBalance(ctx context.Context, tx *gorm.DB, tenant, currency string, delta int64) error {
	id := tenant + "|" + currency
	if err := tx.WithContext(ctx).Exec(`INSERT INTO demo_balances (id, tenant, currency) VALUES (?, ?, ?)
		ON CONFLICT (id) DO NOTHING`, id, tenant, currency).Error; err != nil {
		return fmt.Errorf("balance: %w", err)
	}
	for range 8 {
		var version int64
		if err := tx.WithContext(ctx).Raw(`SELECT version FROM demo_balances WHERE id = ?`, id).Scan(&version).Error; err != nil {
			return fmt.Errorf("balance: %w", err)
		}
		u := claim.VersionedUpdate{Table: "demo_balances", ID: id, Version: version,
			Set: map[string]any{"balance_minor": gorm.Expr("balance_minor + ?", delta)}}
		if delta < 0 {
			u.Extra, u.ExtraArgs = "balance_minor >= ?", []any{-delta}
		}
		err := u.Apply(ctx, tx)
		var gc *claim.GuardConflict
		switch {
		case err == nil:
			return nil
		case errors.As(err, &gc) && gc.Extra:
			return fmt.Errorf("debit %d %s from %s: %w", -delta, currency, tenant, ErrInsufficientBalance)
		case errors.As(err, &gc):
			continue // another transaction moved the balance: read its version again
		default:
			return err
		}
	}
	return fmt.Errorf("balance %s: still changing under us after 8 tries: %w", id, claim.ErrGuardConflict)
}

// OrderTransition is one callback's record against an order.
type OrderTransition struct {
	EventID    string
	EventType  string
	FromStatus string
	ToStatus   string
	Outcome    string
	ReceivedAt time.Time
}

// statusWord is an order status as the key page says it (the console translates it).
func statusWord(s string) string {
	if w, ok := statusWords[OrderStatus(s)]; ok {
		return w
	}
	return s
}

var statusWords = map[OrderStatus]string{OrderPending: "awaiting payment", OrderPaid: "paid", OrderClosed: "closed", OrderRefunded: "refunded"}

// outcomeWords say what a callback did to its order, on the key page.
var outcomeWords = map[string]string{OutcomeApplied: "applied", OutcomeDuplicate: "duplicate: already there",
	OutcomeIgnored: "ignored: can never apply", OutcomeNotYet: "not yet: waits for its precondition"}

// maxPanelTransitions bounds the transitions the key page lists.
const maxPanelTransitions = 200

// KeyPanel is the console's view of the order a payment key opened: its status and every
// callback that reached it, oldest first. Only an order of the key's own tenant is shown (the
// console has already checked the operator may see that tenant).
func (m *Orders) KeyPanel(ctx context.Context, k *claim.Key) (*console.KeyPanel, error) {
	if k.Operation != OperationCharge {
		return nil, nil
	}
	var orders []Order
	if err := m.DB.WithContext(ctx).Raw(`SELECT merchant_order_no, tenant, payment_id, amount_minor, currency, status
		FROM demo_orders WHERE key_id = ? AND tenant = ?`, k.ID, k.Tenant).Scan(&orders).Error; err != nil {
		return nil, fmt.Errorf("order of key %d: %w", k.ID, err)
	}
	if len(orders) == 0 {
		return nil, nil
	}
	o := orders[0]
	var ts []OrderTransition
	if err := m.DB.WithContext(ctx).Raw(`SELECT event_id, event_type, from_status, to_status, outcome, received_at
		FROM demo_order_transitions WHERE merchant_order_no = ? AND tenant = ? ORDER BY id LIMIT ?`,
		o.MerchantOrderNo, k.Tenant, maxPanelTransitions).Scan(&ts).Error; err != nil {
		return nil, fmt.Errorf("transitions of key %d: %w", k.ID, err)
	}
	p := &console.KeyPanel{ID: "order", Title: "Order and channel callbacks",
		Summary: errs.Phrasef("Order %s (payment %s) is %s.", o.MerchantOrderNo, o.PaymentID, errs.Verbatim(statusWord(string(o.Status)))),
		Columns: []string{"Received", "Event", "Callback", "Before", "After", "Outcome"}}
	for _, t := range ts {
		p.Rows = append(p.Rows, []console.Cell{console.At(t.ReceivedAt), console.Code(t.EventType), console.Data(t.EventID),
			console.Word(statusWord(t.FromStatus)), console.Word(statusWord(t.ToStatus)), console.Word(outcomeWords[t.Outcome])})
	}
	return p, nil
}
