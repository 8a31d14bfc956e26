package templates

import "time"

// ConsumersView is the Consumers page: per consumer and tenant its counts, a business key's
// deliveries when one was asked for, and the daemon's compensations of stuck spanning work.
type ConsumersView struct {
	// Unavailable are the tenant cells that did not answer: their records are left out.
	Unavailable   []string
	Stats         []ConsumerRow
	Key           string // the business key looked up ("" when none)
	Deliveries    []DeliveryRow
	Compensations []CompensationRow
}

// ConsumerRow is one consumer's counts for one tenant.
type ConsumerRow struct {
	Consumer, Tenant                           string
	Processed, Duplicates, InProcessing, Stuck int64
	LastAt                                     *time.Time
}

// DeliveryRow is one dedup record of the looked-up business key.
type DeliveryRow struct {
	Consumer, Tenant, BusinessKey, MessageID string
	ConsumedAt                               time.Time
	Duplicates                               int64
	LastDuplicateAt                          *time.Time
}

// CompensationRow is one daemon action on a spanning consumer's record.
type CompensationRow struct {
	Consumer, Tenant, BusinessKey, Kind string
	KeyID                               int64
	At                                  time.Time
}
