package access

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/errs"
)

// Operators manages operator accounts and API tokens. Every change is written together with its
// audit row, in one transaction.
type Operators struct {
	db     *gorm.DB
	argon  Argon2Params
	audit  *audit.Log
	dummy  string // a hash to check against when the name is unknown, so timing tells nothing
	tokens time.Duration

	// passwordChecks counts argon2 verifications Authenticate has run (tests prove the throttle
	// refuses before this work is spent).
	passwordChecks atomic.Int64
}

// NewOperators returns the operator directory on db; every change is audited in log.
func NewOperators(db *gorm.DB, argon Argon2Params, log *audit.Log) *Operators {
	if argon.MemoryKiB == 0 {
		argon = DefaultArgon2
	}
	dummy, _ := HashPassword("not-a-password-of-anyone", argon)
	return &Operators{db: db, argon: argon, audit: log, dummy: dummy}
}

// Audit is the log the directory writes its changes to.
func (d *Operators) Audit() *audit.Log { return d.audit }

// PasswordChecks is how many argon2 verifications Authenticate has run (a test proves the
// throttle refuses before this work is spent).
func (d *Operators) PasswordChecks() int64 { return d.passwordChecks.Load() }

// Change says who changes what, for the audit log.
type Change struct {
	Actor string // operator:NAME or cli:USER
	IP    string
	// Scope is the acting operator's tenants: a target outside them is not found (see covers).
	// nil for the CLI, which whoever holds the database runs.
	Scope []string
}

// operators is a query of operators with their tenants (in the database's order), on db.
func operators(db *gorm.DB) *gorm.DB {
	return db.Model(&operatorModel{}).Preload("Tenants", func(db *gorm.DB) *gorm.DB { return db.Order("tenant") })
}

func (d *Operators) one(ctx context.Context, where string, arg any) (*operatorModel, error) {
	var rows []operatorModel
	if err := operators(d.db.WithContext(ctx)).Where(where, arg).Limit(1).Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("read operator: %w", err)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("operator: %w", ErrNotFound)
	}
	return &rows[0], nil
}

// byNameSQL finds an operator by name ignoring case: names are unique ignoring case (migration
// 00115), and this condition is the one its index serves.
const byNameSQL = "lower(name) = lower(?)"

// ByName returns the operator called name (ignoring case).
func (d *Operators) ByName(ctx context.Context, name string) (*Operator, error) {
	r, err := d.one(ctx, byNameSQL, name)
	if err != nil {
		return nil, err
	}
	return r.operator(), nil
}

// ByID returns the operator with id.
func (d *Operators) ByID(ctx context.Context, id int64) (*Operator, error) {
	r, err := d.one(ctx, "id = ?", id)
	if err != nil {
		return nil, err
	}
	return r.operator(), nil
}

// List returns every operator by name (bounded: operators are people, not rows of traffic).
func (d *Operators) List(ctx context.Context) ([]*Operator, error) {
	var rows []operatorModel
	if err := operators(d.db.WithContext(ctx)).Order("name").Limit(1000).Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("list operators: %w", err)
	}
	out := make([]*Operator, len(rows))
	for i := range rows {
		out[i] = rows[i].operator()
	}
	return out, nil
}

// Authenticate checks name and password: ErrBadCredentials when either is wrong or the
// operator is disabled. It spends the same hashing work when the name is unknown.
func (d *Operators) Authenticate(ctx context.Context, name, password string) (*Operator, error) {
	if len(password) > maxPasswordLen {
		return nil, ErrBadCredentials
	}
	r, err := d.one(ctx, byNameSQL, name)
	if errors.Is(err, ErrNotFound) {
		d.passwordChecks.Add(1)
		CheckPassword(d.dummy, password)
		return nil, ErrBadCredentials
	}
	if err != nil {
		return nil, err
	}
	d.passwordChecks.Add(1)
	if !CheckPassword(r.PasswordHash, password) || r.Disabled {
		return nil, ErrBadCredentials
	}
	return r.operator(), nil
}

// NewOperator is what Add needs.
type NewOperator struct {
	Name     string
	Password string
	Role     Role
	Tenants  []string
}

// Add creates an operator. ErrConflict when the name is taken, in any case, by an operator
// within ch.Scope; a name taken outside it is an *errs.FieldError that says only that the name
// cannot be used.
func (d *Operators) Add(ctx context.Context, ch Change, n NewOperator) (*Operator, error) {
	if !operatorName.MatchString(n.Name) {
		return nil, fieldErr("name", "use 1–64 letters, digits, '.', '_', '@' or '-'")
	}
	if err := ValidatePassword(n.Password); err != nil {
		return nil, err
	}
	if n.Role == RoleNone {
		return nil, fieldErr("role", "is required")
	}
	if len(n.Tenants) == 0 {
		return nil, fieldErr("tenants", "name at least one tenant, or * for all")
	}
	hash, err := HashPassword(n.Password, d.argon)
	if err != nil {
		return nil, err
	}
	m := operatorModel{Name: n.Name, PasswordHash: hash, Role: n.Role.String()}
	err = d.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Omit("Tenants").Create(&m).Error; err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == "23505" {
				return errs.Errorf("operator %s: %w", n.Name, ErrConflict)
			}
			return fmt.Errorf("add operator: %w", err)
		}
		if err := setTenants(tx, m.ID, n.Tenants); err != nil {
			return err
		}
		return d.audit.Append(ctx, tx, audit.Entry{Actor: ch.Actor, IP: ch.IP, Action: "operator.add", Target: "operator:" + n.Name,
			Tenants: n.Tenants, Detail: map[string]any{"role": n.Role.String(), "tenants": n.Tenants}})
	})
	if errors.Is(err, ErrConflict) && ch.Scope != nil {
		var seen int64
		q := d.db.WithContext(ctx).Model(&operatorModel{}).Where(byNameSQL, n.Name)
		if where, args := scopeWhere(ch.Scope); where != "" {
			q = q.Where(where, args...)
		}
		if cerr := q.Count(&seen).Error; cerr != nil {
			return nil, fmt.Errorf("add operator: %w", cerr)
		}
		if seen == 0 {
			// The operator of that name is outside the actor's tenants: say no more than that
			// the name cannot be used (names are unique across tenants).
			return nil, fieldErr("name", "this name cannot be used: choose another")
		}
	}
	if err != nil {
		return nil, err
	}
	return d.ByID(ctx, m.ID)
}

// setTenants replaces the tenants of operator id.
func setTenants(tx *gorm.DB, id int64, tenants []string) error {
	if err := tx.Where("operator_id = ?", id).Delete(&tenantModel{}).Error; err != nil {
		return fmt.Errorf("set tenants: %w", err)
	}
	rows := make([]tenantModel, len(tenants))
	for i, t := range tenants {
		rows[i] = tenantModel{OperatorID: id, Tenant: t}
	}
	if err := tx.Create(&rows).Error; err != nil {
		return fmt.Errorf("set tenants: %w", err)
	}
	return nil
}

// endSessions signs operator id out everywhere (its access changed).
func endSessions(tx *gorm.DB, id int64) error {
	return tx.Exec(`DELETE FROM sessions WHERE operator_id = ?`, id).Error
}

// changeOperator updates the columns of operator id, with updated_at.
func changeOperator(tx *gorm.DB, id int64, cols map[string]any) error {
	cols["updated_at"] = gorm.Expr("now()")
	return tx.Model(&operatorModel{ID: id}).Updates(cols).Error
}

// SetAccess changes an operator's role and tenants; their sessions end so the change applies at
// once.
func (d *Operators) SetAccess(ctx context.Context, ch Change, name string, role Role, tenants []string) error {
	if role == RoleNone || len(tenants) == 0 {
		return fieldErr("role", "role and tenants are required")
	}
	return d.update(ctx, ch, name, "operator.set_access", map[string]any{"role": role.String(), "tenants": tenants}, tenants,
		func(tx *gorm.DB, id int64) error {
			if err := changeOperator(tx, id, map[string]any{"role": role.String()}); err != nil {
				return err
			}
			if err := setTenants(tx, id, tenants); err != nil {
				return err
			}
			return endSessions(tx, id)
		})
}

// SetPassword replaces an operator's password and ends their sessions.
func (d *Operators) SetPassword(ctx context.Context, ch Change, name, password string) error {
	if err := ValidatePassword(password); err != nil {
		return err
	}
	hash, err := HashPassword(password, d.argon)
	if err != nil {
		return err
	}
	return d.update(ctx, ch, name, "operator.passwd", map[string]any{}, nil, func(tx *gorm.DB, id int64) error {
		if err := changeOperator(tx, id, map[string]any{"password_hash": hash}); err != nil {
			return err
		}
		return endSessions(tx, id)
	})
}

// SetDisabled disables (ending sessions; tokens stop working) or re-enables an operator.
func (d *Operators) SetDisabled(ctx context.Context, ch Change, name string, disabled bool) error {
	action := "operator.enable"
	if disabled {
		action = "operator.disable"
	}
	return d.update(ctx, ch, name, action, map[string]any{}, nil, func(tx *gorm.DB, id int64) error {
		if err := changeOperator(tx, id, map[string]any{"disabled": disabled}); err != nil {
			return err
		}
		if !disabled {
			return nil
		}
		return endSessions(tx, id)
	})
}

// update applies a change to operator name within ch's scope, with its audit row under the
// operator's tenants and granted (the tenants a change of access gives it).
func (d *Operators) update(ctx context.Context, ch Change, name, action string, detail map[string]any, granted []string,
	apply func(tx *gorm.DB, id int64) error) error {
	return d.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec(`SELECT pg_advisory_xact_lock(?)`, adminLockID).Error; err != nil {
			return fmt.Errorf("%s: lock: %w", action, err)
		}
		q := operators(tx).Clauses(clause.Locking{Strength: "UPDATE"}).Where(byNameSQL, name)
		if where, sargs := scopeWhere(ch.Scope); where != "" {
			q = q.Where(where, sargs...)
		}
		var rows []operatorModel
		if err := q.Limit(1).Find(&rows).Error; err != nil {
			return fmt.Errorf("%s: %w", action, err)
		}
		if len(rows) == 0 {
			return fmt.Errorf("operator %s: %w", name, ErrNotFound)
		}
		if err := apply(tx, rows[0].ID); err != nil {
			return fmt.Errorf("%s: %w", action, err)
		}
		if err := lastStarAdmin(tx, rows[0].operator().activeStarAdmin(), name); err != nil {
			return err
		}
		// The row concerns the operator's tenants before the change and after it.
		tenants := append(rows[0].operator().Tenants, granted...)
		return d.audit.Append(ctx, tx, audit.Entry{Actor: ch.Actor, IP: ch.IP, Action: action, Target: "operator:" + rows[0].Name,
			Tenants: tenants, Detail: detail})
	})
}

// SetTimeZone sets the zone operator id sees times in (audited as operator.time_zone); zone is
// checked by the caller (templates.LoadZone).
func (d *Operators) SetTimeZone(ctx context.Context, ch Change, id int64, zone string) error {
	return d.setPreference(ctx, ch, id, "time_zone", zone)
}

// SetLanguage sets the console language of operator id (audited as operator.language); code is
// an offered language (templates.ParseLang) or "" to follow the browser again.
func (d *Operators) SetLanguage(ctx context.Context, ch Change, id int64, code string) error {
	return d.setPreference(ctx, ch, id, "language", code)
}

// setPreference sets an operator's own display setting (column), audited as operator.COLUMN.
func (d *Operators) setPreference(ctx context.Context, ch Change, id int64, column, value string) error {
	action := "operator." + column
	return d.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var rows []operatorModel
		if err := operators(tx).Where("id = ?", id).Limit(1).Find(&rows).Error; err != nil {
			return fmt.Errorf("%s: %w", action, err)
		}
		if len(rows) == 0 {
			return fmt.Errorf("operator: %w", ErrNotFound)
		}
		if err := changeOperator(tx, id, map[string]any{column: value}); err != nil {
			return fmt.Errorf("%s: %w", action, err)
		}
		return d.audit.Append(ctx, tx, audit.Entry{Actor: ch.Actor, IP: ch.IP, Action: action,
			Target: "operator:" + rows[0].Name, Tenants: rows[0].operator().Tenants, Detail: map[string]any{column: value}})
	})
}
