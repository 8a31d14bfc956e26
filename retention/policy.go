package retention

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/idemops/idemops/claim"
)

// AllOperations is the operation of a policy that covers every operation without its own.
const AllOperations = "*"

// MaxPeriod bounds every period and floor part (ten years).
const MaxPeriod = 3650 * 24 * time.Hour

// PolicyStates are the states a policy may name: the ones a key ends in. Processing keys have
// no retention; they are never purged.
var PolicyStates = claim.StatesWhere(claim.State.Ended)

// Policy is how long keys of one operation ("*": all without their own) that ended in one state
// keep their response, and how long they are kept at all. After KeepResponse the key stays as a
// tombstone that answers a late retry "result expired"; after KeepKey the row goes.
type Policy struct {
	Operation    string
	State        claim.State
	KeepResponse time.Duration
	KeepKey      time.Duration
	UpdatedAt    time.Time
	UpdatedBy    string
}

// Floor is the shortest keep-key period any policy may have: a key must outlive the client's
// retry window, the manual back-fill window and the reconciliation lag, or a late retry (or a
// back-filled request, or a fix for a finding) would be taken for a new intent and executed again.
type Floor struct {
	ClientRetry       time.Duration
	Backfill          time.Duration
	ReconciliationLag time.Duration
	UpdatedAt         time.Time
	UpdatedBy         string
}

// Total is the floor itself.
func (f Floor) Total() time.Duration { return f.ClientRetry + f.Backfill + f.ReconciliationLag }

// String names the floor and its parts, as refusals quote it.
func (f Floor) String() string {
	return fmt.Sprintf("%s (client retry %s + back-fill %s + reconciliation lag %s)",
		FormatPeriod(f.Total()), FormatPeriod(f.ClientRetry), FormatPeriod(f.Backfill), FormatPeriod(f.ReconciliationLag))
}

// PolicySet is what the console's policy page shows: the floor and every policy.
type PolicySet struct {
	Floor    Floor
	Policies []Policy
}

// ParsePeriod reads a period as the CLI and the console accept it: a Go duration ("72h",
// "1h30m") or whole days ("30d"). Negative periods are refused by validation, not here.
func ParsePeriod(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseInt(days, 10, 64)
		if err != nil || n > int64(MaxPeriod/(24*time.Hour)) || n < -int64(MaxPeriod/(24*time.Hour)) {
			return 0, fmt.Errorf("%q is not a period (use e.g. 72h or 30d)", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a period (use e.g. 72h or 30d)", s)
	}
	return d, nil
}

// FormatPeriod writes a period the way ParsePeriod reads it, in whole days or hours when it is.
func FormatPeriod(d time.Duration) string {
	switch {
	case d == 0:
		return "0"
	case d%(24*time.Hour) == 0:
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	case d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	}
	return d.String()
}

func checkPeriod(field string, d time.Duration) error {
	switch {
	case d < 0:
		return inputErr(ErrInvalidPolicy, field, "must not be negative, got %s", d)
	case d%time.Second != 0:
		return inputErr(ErrInvalidPolicy, field, "must be whole seconds, got %s", d)
	case d > MaxPeriod:
		return inputErr(ErrInvalidPolicy, field, "must be at most %s, got %s", FormatPeriod(MaxPeriod), FormatPeriod(d))
	}
	return nil
}

// ValidOperation checks an operation name as policies and purge filters take it.
func ValidOperation(field, op string) error {
	switch {
	case op == "":
		return inputErr(ErrInvalidPolicy, field, "must not be empty")
	case len(op) > 128:
		return inputErr(ErrInvalidPolicy, field, "is longer than 128 characters")
	case strings.ContainsAny(op, "|\x00\n\r\t"):
		return inputErr(ErrInvalidPolicy, field, "must not contain '|' or control characters")
	}
	return nil
}

// validate checks p on its own and against the floor.
func (p Policy) validate(floor Floor) error {
	if err := ValidOperation("operation", p.Operation); err != nil {
		return err
	}
	known := false
	for _, s := range PolicyStates {
		known = known || p.State == s
	}
	if !known {
		return inputErr(ErrInvalidPolicy, "state", "must be one of completed, failed_final, failed_retryable; got %q", p.State)
	}
	if err := checkPeriod("keep_response", p.KeepResponse); err != nil {
		return err
	}
	if err := checkPeriod("keep_key", p.KeepKey); err != nil {
		return err
	}
	if p.KeepResponse > p.KeepKey {
		return inputErr(ErrInvalidPolicy, "keep_response", "%s is longer than keep_key %s (the response cannot outlive its key)",
			FormatPeriod(p.KeepResponse), FormatPeriod(p.KeepKey))
	}
	if p.KeepKey < floor.Total() {
		return inputErr(ErrBelowFloor, "keep_key", "%s is below the retention floor of %s", FormatPeriod(p.KeepKey), floor)
	}
	return nil
}

// policyModel is a row of retention_policies, settingsModel the one row of retention_settings:
// gorm does their plain CRUD. Columns with a database default are not written on insert; gorm
// drops a column it may not write from an update without a word, so every column an update sets
// allows it.
type policyModel struct {
	Operation           string `gorm:"primaryKey"`
	State               string `gorm:"primaryKey"`
	KeepResponseSeconds int64
	KeepKeySeconds      int64
	UpdatedAt           time.Time `gorm:"<-:update;autoUpdateTime:false"`
	UpdatedBy           string
}

func (policyModel) TableName() string { return "retention_policies" }

type settingsModel struct {
	ID                       bool `gorm:"primaryKey"`
	ClientRetrySeconds       int64
	BackfillSeconds          int64
	ReconciliationLagSeconds int64
	StampCursorAt            time.Time
	StampCursorID            int64
	StampGeneration          int64
	UpdatedAt                time.Time `gorm:"<-:update;autoUpdateTime:false"`
	UpdatedBy                string
}

func (settingsModel) TableName() string { return "retention_settings" }

// settings is an update of the settings row (there is one, id true).
func settings(tx *gorm.DB) *gorm.DB { return tx.Model(&settingsModel{}).Where("id") }

func (r policyModel) policy() Policy {
	return Policy{Operation: r.Operation, State: claim.State(r.State),
		KeepResponse: time.Duration(r.KeepResponseSeconds) * time.Second, KeepKey: time.Duration(r.KeepKeySeconds) * time.Second,
		UpdatedAt: r.UpdatedAt, UpdatedBy: r.UpdatedBy}
}

func (r settingsModel) floor() Floor {
	return Floor{ClientRetry: time.Duration(r.ClientRetrySeconds) * time.Second, Backfill: time.Duration(r.BackfillSeconds) * time.Second,
		ReconciliationLag: time.Duration(r.ReconciliationLagSeconds) * time.Second, UpdatedAt: r.UpdatedAt, UpdatedBy: r.UpdatedBy}
}

func readFloor(db *gorm.DB, lock bool) (Floor, error) {
	q := db.Model(&settingsModel{})
	if lock {
		q = q.Clauses(clause.Locking{Strength: "UPDATE"})
	}
	var rows []settingsModel
	if err := q.Find(&rows).Error; err != nil {
		return Floor{}, fmt.Errorf("read retention floor: %w", err)
	}
	if len(rows) != 1 {
		return Floor{}, errors.New("read retention floor: the retention_settings row is missing (migration 00005)")
	}
	return rows[0].floor(), nil
}

// GetFloor returns the floor.
func GetFloor(ctx context.Context, db *gorm.DB) (Floor, error) {
	return readFloor(db.WithContext(ctx), false)
}

// ListPolicies returns the floor and every policy, ordered by operation ('*' first) and state.
func ListPolicies(ctx context.Context, db *gorm.DB) (*PolicySet, error) {
	floor, err := GetFloor(ctx, db)
	if err != nil {
		return nil, err
	}
	var rows []policyModel
	if err := db.WithContext(ctx).Order("operation <> '*', operation, state").Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("list retention policies: %w", err)
	}
	set := &PolicySet{Floor: floor, Policies: make([]Policy, len(rows))}
	for i, r := range rows {
		set.Policies[i] = r.policy()
	}
	return set, nil
}

// ValidatePolicy checks p against the rules and the current floor without saving it (a form's
// live validation); SavePolicy checks again under its lock.
func ValidatePolicy(ctx context.Context, db *gorm.DB, p Policy) error {
	floor, err := GetFloor(ctx, db)
	if err != nil {
		return err
	}
	return p.validate(floor)
}

// SavePolicy validates p and stores it (insert or replace) on behalf of actor. It returns an
// *errs.FieldError of ErrInvalidPolicy for malformed input and ErrBelowFloor for a keep-key
// period under the floor; nothing is written then. Saving moves the purge's stamp cursor back to
// the start, so the next purge re-stamps the expiry of existing keys under the new policy.
func SavePolicy(ctx context.Context, db *gorm.DB, p Policy, actor string) error {
	if err := checkActor(actor); err != nil {
		return err
	}
	return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		// The settings row lock orders this against SetFloor: a floor raised concurrently
		// cannot slip under a policy being saved.
		floor, err := readFloor(tx, true)
		if err != nil {
			return err
		}
		if err := p.validate(floor); err != nil {
			return err
		}
		replace := clause.AssignmentColumns([]string{"keep_response_seconds", "keep_key_seconds", "updated_by"})
		replace = append(replace, clause.Assignment{Column: clause.Column{Name: "updated_at"}, Value: gorm.Expr("now()")})
		row := policyModel{Operation: p.Operation, State: string(p.State), KeepResponseSeconds: int64(p.KeepResponse / time.Second),
			KeepKeySeconds: int64(p.KeepKey / time.Second), UpdatedBy: actor}
		if err := tx.Clauses(clause.OnConflict{Columns: []clause.Column{{Name: "operation"}, {Name: "state"}}, DoUpdates: replace}).
			Create(&row).Error; err != nil {
			return fmt.Errorf("save retention policy %s/%s: %w", p.Operation, p.State, err)
		}
		return resetStampCursor(tx)
	})
}

// DeletePolicy removes the policy for operation and state; keys it covered fall back to the
// '*' policy or, without one, keep the expiry they have. ErrPolicyNotFound when there is none.
func DeletePolicy(ctx context.Context, db *gorm.DB, operation string, state claim.State, actor string) error {
	if err := checkActor(actor); err != nil {
		return err
	}
	return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if _, err := readFloor(tx, true); err != nil {
			return err
		}
		res := tx.Where("operation = ? AND state = ?", operation, string(state)).Delete(&policyModel{})
		if res.Error != nil {
			return fmt.Errorf("delete retention policy %s/%s: %w", operation, state, res.Error)
		}
		if res.RowsAffected == 0 {
			return fmt.Errorf("%s/%s: %w", operation, state, ErrPolicyNotFound)
		}
		return resetStampCursor(tx)
	})
}

// SetFloor stores the floor's parts on behalf of actor. A floor above the keep-key period of an
// existing policy is refused (ErrBelowFloor, naming the policy): change that policy first.
func SetFloor(ctx context.Context, db *gorm.DB, f Floor, actor string) error {
	if err := checkActor(actor); err != nil {
		return err
	}
	for _, part := range []struct {
		field string
		d     time.Duration
	}{{"client_retry", f.ClientRetry}, {"backfill", f.Backfill}, {"reconciliation_lag", f.ReconciliationLag}} {
		if err := checkPeriod(part.field, part.d); err != nil {
			return err
		}
	}
	return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if _, err := readFloor(tx, true); err != nil {
			return err
		}
		var short []policyModel
		if err := tx.Where("keep_key_seconds < ?", int64(f.Total()/time.Second)).
			Order("keep_key_seconds, operation, state").Limit(1).Find(&short).Error; err != nil {
			return fmt.Errorf("check policies against the floor: %w", err)
		}
		if len(short) > 0 {
			s := short[0]
			return inputErr(ErrBelowFloor, "floor", "%s would be above the keep_key %s of policy %s/%s",
				f, FormatPeriod(time.Duration(s.KeepKeySeconds)*time.Second), s.Operation, s.State)
		}
		if err := settings(tx).Updates(map[string]any{"client_retry_seconds": int64(f.ClientRetry / time.Second),
			"backfill_seconds": int64(f.Backfill / time.Second), "reconciliation_lag_seconds": int64(f.ReconciliationLag / time.Second),
			"updated_at": gorm.Expr("now()"), "updated_by": actor, "stamp_generation": gorm.Expr("stamp_generation + 1")}).Error; err != nil {
			return fmt.Errorf("save retention floor: %w", err)
		}
		return nil
	})
}

func checkActor(actor string) error {
	if strings.TrimSpace(actor) == "" || len(actor) > 200 {
		return inputErr(ErrInvalidPolicy, "actor", "must name who changes retention (operator:NAME), 1-200 characters")
	}
	return nil
}

// resetStampCursor makes the next purge re-stamp every ended key under the current policies.
func resetStampCursor(tx *gorm.DB) error {
	if err := settings(tx).Updates(map[string]any{"stamp_cursor_at": gorm.Expr("'0001-01-01 00:00:00+00'"), "stamp_cursor_id": 0,
		"stamp_generation": gorm.Expr("stamp_generation + 1")}).Error; err != nil {
		return fmt.Errorf("reset stamp cursor: %w", err)
	}
	return nil
}

// expiryPolicies turns the policies into what claim's retention functions take.
func (s *PolicySet) expiryPolicies() []claim.ExpiryPolicy {
	out := make([]claim.ExpiryPolicy, len(s.Policies))
	for i, p := range s.Policies {
		out[i] = claim.ExpiryPolicy{Operation: p.Operation, State: p.State, KeepResponse: p.KeepResponse, KeepKey: p.KeepKey}
	}
	return out
}
