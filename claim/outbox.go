package claim

import (
	"context"
	"encoding/json"
	"fmt"

	"gorm.io/gorm"
)

// OutboxMessage is an external action staged in the business transaction. The daemon's relay
// sends it after commit, carrying DownstreamKey so the receiver dedupes a resend.
type OutboxMessage struct {
	KeyID         int64
	Operation     string
	DownstreamKey string
	Payload       json.RawMessage
}

// Enqueue writes an outbox row in tx, the caller's transaction, so the action exists exactly when
// the business change does. Enqueuing the same (operation, downstream key) twice keeps one row.
func Enqueue(ctx context.Context, tx *gorm.DB, m OutboxMessage) error {
	if m.Operation == "" || m.DownstreamKey == "" || !json.Valid(m.Payload) {
		return fmt.Errorf("enqueue: operation, downstream key and a JSON payload are required")
	}
	var keyID any
	if m.KeyID != 0 {
		keyID = m.KeyID
	}
	err := tx.WithContext(ctx).Exec(`INSERT INTO outbox (key_id, operation, downstream_key, payload) VALUES (?, ?, ?, ?)
		ON CONFLICT (operation, downstream_key) DO NOTHING`, keyID, m.Operation, m.DownstreamKey, string(m.Payload)).Error
	if err != nil {
		return fmt.Errorf("enqueue %s: %w", m.Operation, err)
	}
	return nil
}

// ConsumeOnce records, in tx, that consumer has handled the message for businessKey (an order
// id, not the message id: a redelivery under a new message id must still be skipped). It reports
// whether this is the first time; on false the caller skips the business update. Acknowledge the
// message only after tx commits.
func ConsumeOnce(ctx context.Context, tx *gorm.DB, consumer, businessKey, messageID string) (bool, error) {
	return RecordConsumed(ctx, tx, Consumed{Consumer: consumer, BusinessKey: businessKey, MessageID: messageID})
}

// Consumed names one delivery for RecordConsumed.
type Consumed struct {
	Consumer    string
	Tenant      string
	BusinessKey string // the business identity (an order id), never the message id
	MessageID   string
}

// RecordConsumed is ConsumeOnce with the tenant: in tx, it inserts the dedup row for
// (consumer, business key) and reports true the first time; a later delivery finds the row,
// counts itself as a dropped duplicate on it and reports false. One statement either way
// (the primary key serves it); a rolled-back tx leaves no row, so the redelivery is processed.
func RecordConsumed(ctx context.Context, tx *gorm.DB, c Consumed) (bool, error) {
	if c.Consumer == "" || c.BusinessKey == "" {
		return false, fmt.Errorf("consume: consumer and business key are required")
	}
	var inserted []bool
	err := tx.WithContext(ctx).Raw(`INSERT INTO consumed_messages (consumer, tenant, business_key, message_id) VALUES (?, ?, ?, ?)
		ON CONFLICT (consumer, business_key) DO UPDATE
		SET duplicates = consumed_messages.duplicates + 1, last_duplicate_at = now()
		RETURNING (xmax = 0)`, c.Consumer, c.Tenant, c.BusinessKey, c.MessageID).Scan(&inserted).Error
	if err != nil {
		return false, fmt.Errorf("consume %s: %w", c.Consumer, Fenced(err))
	}
	return len(inserted) == 1 && inserted[0], nil
}

// RecordConsumedBatch is RecordConsumed for several deliveries in one statement (the consumer's
// batch, in its one transaction): first[i] reports whether cs[i] is the first delivery of its
// business key. A key repeated within cs is first at most once. Duplicates are counted on their
// rows with one more statement, only when there are any. Rows are inserted in key order, so two
// batches sharing keys wait for each other instead of deadlocking.
func RecordConsumedBatch(ctx context.Context, tx *gorm.DB, consumer string, cs []Consumed) (first []bool, err error) {
	type row struct {
		Tenant      string `json:"tenant"`
		BusinessKey string `json:"business_key"`
		MessageID   string `json:"message_id"`
	}
	first = make([]bool, len(cs))
	seen := map[string]int{} // business key → index of its candidate
	var rows []row
	for i, c := range cs {
		if consumer == "" || c.BusinessKey == "" {
			return nil, fmt.Errorf("consume: consumer and business key are required")
		}
		if _, dup := seen[c.BusinessKey]; dup {
			continue
		}
		seen[c.BusinessKey] = i
		rows = append(rows, row{c.Tenant, c.BusinessKey, c.MessageID})
	}
	in, _ := json.Marshal(rows)
	var inserted []string
	err = tx.WithContext(ctx).Raw(`WITH input AS (
			SELECT * FROM jsonb_to_recordset(?::jsonb) AS r(tenant text, business_key text, message_id text)
		), ins AS (
			INSERT INTO consumed_messages (consumer, tenant, business_key, message_id)
			SELECT ?, tenant, business_key, message_id FROM input ORDER BY business_key
			ON CONFLICT (consumer, business_key) DO NOTHING
			RETURNING business_key
		)
		SELECT business_key FROM ins`, string(in), consumer).Scan(&inserted).Error
	if err != nil {
		return nil, fmt.Errorf("consume %s: %w", consumer, Fenced(err))
	}
	for _, k := range inserted {
		first[seen[k]] = true
	}
	dups := map[string]int{}
	for i, c := range cs {
		if !first[i] {
			dups[c.BusinessKey]++
		}
	}
	if len(dups) == 0 {
		return first, nil
	}
	dj, _ := json.Marshal(dups)
	err = tx.WithContext(ctx).Exec(`UPDATE consumed_messages c SET duplicates = c.duplicates + d.value::int, last_duplicate_at = now()
		FROM jsonb_each_text(?::jsonb) AS d WHERE c.consumer = ? AND c.business_key = d.key`, string(dj), consumer).Error
	if err != nil {
		return nil, fmt.Errorf("consume %s: count duplicates: %w", consumer, err)
	}
	return first, nil
}
