package demo

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/idemops/idemops/downstream/paysim"
)

// RunChannelTraffic makes, until ctx is done, the events that come from the channel's side
// rather than the payments API, so the order state machine has refunds and closes to handle:
// every interval it refunds one recently paid order at paysim (a refund from the merchant
// portal) or, one time in three, opens an order its customer never pays and has the channel
// close it. Each tick does one bounded query and one call.
func (w *World) RunChannelTraffic(ctx context.Context, every time.Duration, seed uint64, log *slog.Logger) {
	if log == nil {
		log = slog.Default()
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x5bd1e995))
	t := time.NewTicker(every)
	defer t.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		var err error
		if rng.IntN(3) == 0 {
			err = w.closeUnpaidOrder(tctx, n)
		} else {
			err = w.refundRecentOrder(tctx)
		}
		cancel()
		if err != nil && ctx.Err() == nil {
			log.Warn("demo channel traffic", "err", err)
		}
	}
}

func (w *World) refundRecentOrder(ctx context.Context) error {
	type paidOrder struct {
		MerchantOrderNo string
		AmountMinor     int64
		UpdatedAt       time.Time
	}
	var last *paidOrder
	// The most recently paid order of any cell. The demo's orders table is small; a production
	// job would walk an index.
	for _, db := range w.cells.dbs(w.tenants()) {
		var o []paidOrder
		if err := db.WithContext(ctx).Raw(`SELECT merchant_order_no, amount_minor, updated_at FROM demo_orders
			WHERE status = 'paid' AND updated_at > now() - interval '5 minutes' ORDER BY updated_at DESC LIMIT 1`).Scan(&o).Error; err != nil {
			return err
		}
		if len(o) == 1 && (last == nil || o[0].UpdatedAt.After(last.UpdatedAt)) {
			last = &o[0]
		}
	}
	if last == nil {
		return nil
	}
	_, err := w.Client.Refund(ctx, last.MerchantOrderNo, "refund-"+last.MerchantOrderNo, paysimRefund(last.AmountMinor))
	return err
}

// closeUnpaidOrder opens an order for one of the tenants, in its cell, and has the channel
// close it unpaid.
func (w *World) closeUnpaidOrder(ctx context.Context, n int) error {
	tenant := "acme"
	for _, t := range w.APIKeys {
		tenant = t
		break
	}
	db, err := w.cells.dbOf(tenant)
	if err != nil {
		return err
	}
	no := fmt.Sprintf("unpaid-%d-%d", time.Now().Unix(), n)
	if err := db.WithContext(ctx).Exec(`INSERT INTO demo_orders (merchant_order_no, tenant, payment_id, amount_minor, currency, status)
		VALUES (?, ?, ?, 100, 'CNY', 'pending')`, no, tenant, no).Error; err != nil {
		return err
	}
	return w.Client.CloseOrder(ctx, no, "")
}

func paysimRefund(amount int64) paysim.RefundRequest {
	return paysim.RefundRequest{AmountMinor: amount, Reason: "demo refund"}
}
