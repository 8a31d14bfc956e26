package consume

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"
)

// What the console's Consumers page reads. Every query takes the tenants the reader may see:
// nil means every tenant; an empty non-nil slice, none.

// ConsumerStat is one consumer's counts for one tenant.
type ConsumerStat struct {
	Consumer     string
	Tenant       string
	Processed    int64 // dedup rows: business keys whose work committed
	Duplicates   int64 // deliveries dropped as duplicates
	InProcessing int64 // spanning work: claim keys still processing
	Stuck        int64 // of those, the ones whose lease ran out (the daemon compensates them)
	LastAt       *time.Time
}

// Delivery is one business key's dedup record: when it was consumed, under which message id,
// and how many later deliveries were dropped.
type Delivery struct {
	Consumer        string
	Tenant          string
	BusinessKey     string
	MessageID       string
	ConsumedAt      time.Time
	Duplicates      int64
	LastDuplicateAt *time.Time
}

// Compensation is one daemon action on a spanning consumer's stuck record.
type Compensation struct {
	Consumer    string
	Tenant      string
	BusinessKey string
	KeyID       int64
	Kind        string // taken_over, recovered_from_downstream, …
	At          time.Time
}

// consumerActor is how a spanning consumer claims its keys (claim.Request.Actor).
const consumerActor = "consumer:"

func tenantFilter(column string, tenants []string) (string, []any) {
	if tenants == nil {
		return "TRUE", nil
	}
	if len(tenants) == 0 {
		return "FALSE", nil
	}
	return column + " IN ?", []any{tenants}
}

// ListStats returns the counts per consumer and tenant (at most 500 rows). Processed and
// duplicates come from the dedup table; processing and stuck from the claim keys spanning
// consumers hold (found by the actor of their claim).
func ListStats(ctx context.Context, db *gorm.DB, tenants []string) ([]ConsumerStat, error) {
	where, args := tenantFilter("tenant", tenants)
	var stats []ConsumerStat
	err := db.WithContext(ctx).Raw(`SELECT consumer, tenant, count(*) AS processed, coalesce(sum(duplicates), 0) AS duplicates,
			max(consumed_at) AS last_at
		FROM consumed_messages WHERE `+where+`
		GROUP BY consumer, tenant ORDER BY consumer, tenant LIMIT 500`, args...).Scan(&stats).Error
	if err != nil {
		return nil, fmt.Errorf("consumer stats: %w", err)
	}
	kwhere, kargs := tenantFilter("k.tenant", tenants)
	var open []ConsumerStat
	// idempotency_keys_reclaim_idx (partial, processing) serves the scan; claim events by key_id (key_history: stored, or on the key row).
	err = db.WithContext(ctx).Raw(`SELECT substr(e.actor, ?) AS consumer, k.tenant,
			count(*) AS in_processing, count(*) FILTER (WHERE k.lease_expires_at < now()) AS stuck
		FROM idempotency_keys k JOIN key_history e ON e.key_id = k.id AND e.kind = 'claimed' AND e.actor LIKE ?
		WHERE k.state = 'processing' AND `+kwhere+`
		GROUP BY 1, 2`, append([]any{len(consumerActor) + 1, consumerActor + "%"}, kargs...)...).Scan(&open).Error
	if err != nil {
		return nil, fmt.Errorf("consumer stats: %w", err)
	}
	for _, o := range open {
		found := false
		for i := range stats {
			if stats[i].Consumer == o.Consumer && stats[i].Tenant == o.Tenant {
				stats[i].InProcessing, stats[i].Stuck, found = o.InProcessing, o.Stuck, true
			}
		}
		if !found {
			stats = append(stats, o)
		}
	}
	return stats, nil
}

// FindDeliveries returns the dedup records of businessKey (every consumer, at most 100).
func FindDeliveries(ctx context.Context, db *gorm.DB, tenants []string, businessKey string) ([]Delivery, error) {
	where, args := tenantFilter("tenant", tenants)
	var ds []Delivery
	err := db.WithContext(ctx).Raw(`SELECT consumer, tenant, business_key, message_id, consumed_at, duplicates, last_duplicate_at
		FROM consumed_messages WHERE business_key = ? AND `+where+` ORDER BY consumer LIMIT 100`,
		append([]any{businessKey}, args...)...).Scan(&ds).Error
	if err != nil {
		return nil, fmt.Errorf("deliveries of a business key: %w", err)
	}
	return ds, nil
}

// ListCompensations returns the daemon's latest actions on spanning consumers' records (at
// most limit, ≤ 200), newest first. A scheduled purge's response_expired is retention, not a
// compensation: left out (which also keeps key_history's branch of dropped days, every key of a
// day, out of the plan).
func ListCompensations(ctx context.Context, db *gorm.DB, tenants []string, limit int) ([]Compensation, error) {
	limit = min(max(limit, 1), 200)
	where, args := tenantFilter("k.tenant", tenants)
	var cs []Compensation
	err := db.WithContext(ctx).Raw(`SELECT substr(c.actor, ?) AS consumer, k.tenant, k.key AS business_key, k.id AS key_id, e.kind, e.at
		FROM key_history e
		JOIN idempotency_keys k ON k.id = e.key_id
		JOIN key_history c ON c.key_id = k.id AND c.kind = 'claimed' AND c.actor LIKE ?
		WHERE e.actor = 'daemon' AND e.kind <> 'response_expired' AND `+where+`
		ORDER BY e.at DESC, e.id DESC LIMIT ?`,
		append(append([]any{len(consumerActor) + 1, consumerActor + "%"}, args...), limit)...).Scan(&cs).Error
	if err != nil {
		return nil, fmt.Errorf("compensations: %w", err)
	}
	return cs, nil
}
