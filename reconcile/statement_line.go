package reconcile

import (
	"context"
	"fmt"
	"time"
)

// StoredLine is one imported line of a statement as the channel stated it, and the key its
// merchant order number names (nil: none). Matching may have paired it with another key by the
// channel's transaction id; this is the line's own naming.
type StoredLine struct {
	LineNo          int
	ChannelTxnID    string
	MerchantOrderNo string
	AmountMinor     int64
	Currency        string
	Status          string
	OccurredAt      time.Time
	Raw             string
	KeyID           *int64
}

// StoredLine reads line lineNo of statement statementID (the BRIN index on statement_id narrows
// the scan to the statement's pages).
// Errors: ErrNotFound.
func (r *Reconciler) StoredLine(ctx context.Context, statementID int64, lineNo int) (*StoredLine, error) {
	var lines []StoredLine
	if err := r.db.WithContext(ctx).Raw(`SELECT l.line_no, l.channel_txn_id, l.merchant_order_no, l.amount_minor, l.currency, l.status,
			l.occurred_at, l.raw, k.id AS key_id
		FROM statement_lines l LEFT JOIN idempotency_keys k ON k.downstream_key = l.merchant_order_no AND l.merchant_order_no <> ''
		WHERE l.statement_id = ? AND l.line_no = ? LIMIT 1`, statementID, lineNo).Scan(&lines).Error; err != nil {
		return nil, fmt.Errorf("read statement line: %w", err)
	}
	if len(lines) == 0 {
		return nil, fmt.Errorf("line %d of statement %d: %w", lineNo, statementID, ErrNotFound)
	}
	return &lines[0], nil
}
