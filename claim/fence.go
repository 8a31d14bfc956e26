package claim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemops/idemops/errs"
)

// ErrTenantMoving: the tenant's keys are fenced in this cell (migration 00135, cell_fences)
// because a tenant move is under way or has moved the tenant elsewhere. Nothing was written; the
// same request with the same key may come back later (after Retry-After), and gets this answer
// again while the fence stands. errors.As with *TenantMovingError gives the fence's state and,
// once the tenant is gone, the cell it moved to.
var ErrTenantMoving = errs.New(errs.Unavailable, "tenant is moving between cells")

// Fence states (cell_fences.state).
const (
	FenceFrozen   = "frozen"   // source, until the switch: nothing new starts (rows being copied)
	FenceIncoming = "incoming" // target: nobody but the mover writes until the switch
	FenceGone     = "gone"     // source after the switch: MovedTo holds the tenant
)

// TenantMovingError is ErrTenantMoving with the fence that refused the write.
type TenantMovingError struct {
	Tenant  string `json:"tenant"`
	State   string `json:"state"`
	MovedTo string `json:"moved_to"`
	cause   error
}

func (e *TenantMovingError) Error() string {
	if e.MovedTo != "" {
		return fmt.Sprintf("tenant %q is moving between cells (%s, moved to %s)", e.Tenant, e.State, e.MovedTo)
	}
	return fmt.Sprintf("tenant %q is moving between cells (%s)", e.Tenant, e.State)
}

// Is makes errors.Is(err, ErrTenantMoving) hold.
func (e *TenantMovingError) Is(target error) bool { return target == ErrTenantMoving }

// ErrorKind is Unavailable: a retry later succeeds (in this cell or, after the switch, in the
// tenant's new one).
func (e *TenantMovingError) ErrorKind() errs.Kind { return errs.Unavailable }

// Unwrap is the database's refusal.
func (e *TenantMovingError) Unwrap() error { return e.cause }

// fenceSQLState is the SQLSTATE cell_fence_check() raises.
const fenceSQLState = "IF001"

// Fenced turns the fence trigger's refusal (a *pgconn.PgError anywhere in err's chain) into a
// *TenantMovingError; any other error is returned as it is. Callers wrap the result in their
// context as usual. claim's own writes apply it; another package writing idempotency_keys (an
// operator action, retention) may too.
func Fenced(err error) error {
	var pe *pgconn.PgError
	if err == nil || !errors.As(err, &pe) || pe.Code != fenceSQLState {
		return err
	}
	e := &TenantMovingError{cause: err}
	if json.Unmarshal([]byte(pe.Detail), e) != nil || e.State == "" {
		e.State = "unknown"
	}
	return e
}

// fence is ErrTenantMoving when tenant is fenced in this cell, else nil. A claim whose guarded
// insert wrote nothing and found no key asks it.
func (s *Store) fence(ctx context.Context, tenant string) error {
	var rows []TenantMovingError
	if err := s.db.WithContext(ctx).Raw(`SELECT tenant, state, COALESCE(moved_to, '') AS moved_to FROM cell_fences WHERE tenant = ?`,
		tenant).Scan(&rows).Error; err != nil {
		return fmt.Errorf("read the fence of %q: %w", tenant, err)
	}
	if len(rows) == 0 {
		return nil
	}
	return &rows[0]
}
