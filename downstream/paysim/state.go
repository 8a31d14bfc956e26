package paysim

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Charge statuses.
const (
	StatusSucceeded = "succeeded"
	StatusFailed    = "failed"
)

// Charge is one payment at the channel.
type Charge struct {
	// ID is the channel's transaction id (ch_…).
	ID     string `json:"id"`
	Status string `json:"status"`
	// FailureCode says why a failed charge failed ("declined").
	FailureCode string `json:"failure_code,omitempty"`
	AmountMinor int64  `json:"amount_minor"`
	Currency    string `json:"currency"`
	// MerchantOrderNo is the merchant's order number: the downstream key.
	MerchantOrderNo string `json:"merchant_order_no"`
	Payee           string `json:"payee,omitempty"`
	Description     string `json:"description,omitempty"`
	// Channel is the channel the charge went through ("" for none in particular; see
	// ChargeRequest.Channel).
	Channel   string    `json:"channel,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// RefundedMinor is the sum of the charge's refunds.
	RefundedMinor int64 `json:"refunded_minor"`
}

// Refund is one refund of a charge.
type Refund struct {
	ID              string `json:"id"`
	ChargeID        string `json:"charge_id"`
	MerchantOrderNo string `json:"merchant_order_no"`
	// MerchantRefundNo is the refund's Idempotency-Key.
	MerchantRefundNo string    `json:"merchant_refund_no"`
	Status           string    `json:"status"`
	AmountMinor      int64     `json:"amount_minor"`
	Currency         string    `json:"currency"`
	Reason           string    `json:"reason,omitempty"`
	CreatedAt        time.Time `json:"created_at"`
}

// Notification is a receipt notification received under one key, with how often it arrived.
type Notification struct {
	Key             string          `json:"key"`
	Body            json.RawMessage `json:"body"`
	FirstReceivedAt time.Time       `json:"first_received_at"`
	Deliveries      int             `json:"deliveries"`
}

// Charge origins, kept in the state so fabricated anomalies stay recognisable.
const (
	originAPI    = "api"    // POST /charges
	originDouble = "double" // the second charge of a no-key double charge
	originAdmin  = "admin"  // POST /_paysim/charges: the merchant never asked for it
)

type chargeRecord struct {
	Charge
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	Fingerprint    string `json:"fingerprint,omitempty"`
	Origin         string `json:"origin"`
}

type refundRecord struct {
	Refund
	Fingerprint string `json:"fingerprint"`
}

type notificationRecord struct {
	Notification
	Fingerprint string `json:"fingerprint"`
}

// state is everything the channel knows, guarded by Server.mu. The slices keep creation order;
// the maps index them.
type state struct {
	Seq           uint64                `json:"seq"`
	Charges       []*chargeRecord       `json:"charges"`
	Refunds       []*refundRecord       `json:"refunds"`
	Notifications []*notificationRecord `json:"notifications"`
	// Callbacks are the asynchronous notifications to the merchant, delivered or not.
	Callbacks []*Callback `json:"callbacks,omitempty"`

	byKey     map[string]*chargeRecord   // Idempotency-Key → charge
	byOrder   map[string][]*chargeRecord // merchant order number → charges, oldest first
	byID      map[string]*chargeRecord
	refundKey map[string]*refundRecord // order number \x00 refund key → refund
	notes     map[string]*notificationRecord
}

func newState() *state {
	st := &state{}
	st.index()
	return st
}

// index rebuilds the maps from the slices (after a load).
func (st *state) index() {
	st.byKey = map[string]*chargeRecord{}
	st.byOrder = map[string][]*chargeRecord{}
	st.byID = map[string]*chargeRecord{}
	st.refundKey = map[string]*refundRecord{}
	st.notes = map[string]*notificationRecord{}
	for _, c := range st.Charges {
		st.indexCharge(c)
	}
	for _, r := range st.Refunds {
		st.refundKey[r.MerchantOrderNo+"\x00"+r.MerchantRefundNo] = r
	}
	for _, n := range st.Notifications {
		st.notes[n.Key] = n
	}
}

func (st *state) indexCharge(c *chargeRecord) {
	if c.IdempotencyKey != "" {
		st.byKey[c.IdempotencyKey] = c
	}
	st.byOrder[c.MerchantOrderNo] = append(st.byOrder[c.MerchantOrderNo], c)
	st.byID[c.ID] = c
}

// newID derives the next id for kind from the seed and a sequence, so a seeded run creates the
// same ids in the same order.
func (st *state) newID(seed int64, prefix string) string {
	st.Seq++
	sum := sha256.Sum256([]byte(fmt.Sprintf("paysim|%d|%s|%d", seed, prefix, st.Seq)))
	return prefix + hex.EncodeToString(sum[:12])
}

// stateFileVersion guards the persisted layout.
const stateFileVersion = 1

type stateFile struct {
	Version int `json:"version"`
	*state
}

// maxStateFileBytes bounds what load reads.
const maxStateFileBytes = 512 << 20

// loadState reads path; a missing file is an empty state.
func loadState(path string) (*state, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return newState(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("paysim: state file: %w", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > maxStateFileBytes {
		return nil, fmt.Errorf("paysim: state file %s: %d bytes, at most %d", path, fi.Size(), maxStateFileBytes)
	}
	sf := stateFile{state: &state{}}
	if err := json.NewDecoder(f).Decode(&sf); err != nil {
		return nil, fmt.Errorf("paysim: state file %s: %w", path, err)
	}
	if sf.Version != stateFileVersion {
		return nil, fmt.Errorf("paysim: state file %s: version %d, want %d", path, sf.Version, stateFileVersion)
	}
	sf.state.index()
	return sf.state, nil
}

func sha256Sum(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func writeFileAtomic(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("paysim: save state: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("paysim: save state: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("paysim: save state: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("paysim: save state: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("paysim: save state: %w", err)
	}
	// The rename is durable only once the directory is.
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		err = d.Sync()
		d.Close()
		if err != nil {
			return fmt.Errorf("paysim: save state: %w", err)
		}
	}
	return nil
}
