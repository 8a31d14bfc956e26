package consume

import (
	"context"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
)

// Recorded wraps op, the remote part of a spanning consumer's work, so that its Apply also
// records the dedup row (consumer, business key) in the transaction that completes the key.
// Register the same wrapped Operation with the daemon's reclaim job, so that a key it
// compensates is counted like one the consumer completed.
func Recorded(consumer string, op claim.Operation) claim.Operation {
	return recordedOp{Operation: op, consumer: consumer}
}

type recordedOp struct {
	claim.Operation
	consumer string
}

func (o recordedOp) Apply(ctx context.Context, tx *gorm.DB, l *claim.Lease, doc *claim.Document) (*claim.Snapshot, error) {
	if _, err := claim.RecordConsumed(ctx, tx, claim.Consumed{Consumer: o.consumer, Tenant: l.Tenant,
		BusinessKey: l.Key, MessageID: l.DownstreamKey}); err != nil {
		return nil, err
	}
	return o.Operation.Apply(ctx, tx, l, doc)
}

// Redrive passes the wrapped Operation's choice through.
func (o recordedOp) Redrive() bool {
	r, ok := o.Operation.(claim.Redriver)
	return ok && r.Redrive()
}

// NewSpanning makes a consumer for work that spans services: each message's business key is a
// claim key (tenant, op.Name(), business key), so its dedup record is processing while the
// work runs and completed after, and claim.Store.Run does claim → execute remotely under the
// downstream key → apply + complete. A duplicate gets the key's replay and is acknowledged; a
// key in progress elsewhere is handed back; a key left processing by a dead consumer is
// compensated by the daemon's reclaim job (downstream looked up first). op should be
// Recorded(cfg.Consumer, remote).
func NewSpanning(store *claim.Store, cfg Config, op claim.Operation) (*Consumer, error) {
	c, err := newConsumer(cfg, store != nil && op != nil, "a claim store and an operation")
	if err != nil {
		return nil, err
	}
	cfg = c.cfg
	c.process = func(ctx context.Context, m Message, tenant, key string) outcome {
		store, ok := c.storeFor(store, tenant)
		if !ok {
			return outRetry
		}
		out, err := store.Run(ctx, op, claim.Request{Tenant: tenant, Key: key, Intent: m.Body,
			Actor: "consumer:" + cfg.Consumer})
		if err != nil {
			cfg.Logger.Warn("consume: spanning work failed; the message is handed back", "consumer", cfg.Consumer, "err", err)
			return outRetry
		}
		switch out.Kind {
		case claim.Completed, claim.Recovered:
			return outProcessed
		case claim.Replay, claim.Expired, claim.Mismatch:
			// Done before (a mismatch is the same business key with another payload: the
			// first one stands). Count the dropped delivery on the dedup row.
			_ = store.DB().WithContext(ctx).Transaction(func(tx *gorm.DB) error {
				_, err := claim.RecordConsumed(ctx, tx, claim.Consumed{Consumer: cfg.Consumer, Tenant: tenant,
					BusinessKey: key, MessageID: m.MessageID})
				return err
			})
			return outDuplicate
		default: // in progress elsewhere, or this attempt failed retryably
			return outRetry
		}
	}
	return c, nil
}
