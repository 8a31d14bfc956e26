package console

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"

	"github.com/idemops/idemops/errs"
)

// Role orders what an operator may do: viewer < operator < admin.
type Role int

const (
	// RoleNone is the role of an anonymous request (public routes only).
	RoleNone Role = iota
	// RoleViewer browses keys (redacted), the dashboard.
	RoleViewer
	// RoleOperator may also reveal request and response bodies and check downstream.
	RoleOperator
	// RoleAdmin may also manage operators and read the audit log.
	RoleAdmin
)

// Roles lists the assignable roles, lowest first.
var Roles = []Role{RoleViewer, RoleOperator, RoleAdmin}

func (r Role) String() string {
	switch r {
	case RoleViewer:
		return "viewer"
	case RoleOperator:
		return "operator"
	case RoleAdmin:
		return "admin"
	}
	return "anonymous"
}

// ParseRole reads a role name.
func ParseRole(s string) (Role, error) {
	for _, r := range Roles {
		if r.String() == strings.TrimSpace(s) {
			return r, nil
		}
	}
	return RoleNone, inputErr("role", "%q is not one of viewer, operator, admin", s)
}

// AllTenants is the tenant entry that grants every tenant.
const AllTenants = "*"

// Operator is a person (or automation, through a token) using the console.
type Operator struct {
	ID          int64
	Name        string
	Role        Role
	Tenants     []string // sorted; ["*"] for every tenant
	Disabled    bool
	CreatedAt   time.Time
	LastLoginAt *time.Time
	TimeZone    string // IANA zone the console shows this operator's times in
	Language    string // console language chosen in the header ("en", "zh-CN"; "" = the browser's)
}

// SeesAllTenants reports whether o may see every tenant.
func (o *Operator) SeesAllTenants() bool { return slices.Contains(o.Tenants, AllTenants) }

// MaySee reports whether o may see keys of tenant.
func (o *Operator) MaySee(tenant string) bool {
	return o.SeesAllTenants() || slices.Contains(o.Tenants, tenant)
}

// Actor is how o appears in key events and the audit log.
func (o *Operator) Actor() string { return "operator:" + o.Name }

var operatorName = regexp.MustCompile(`^[A-Za-z0-9._@-]{1,64}$`)

// ParseTenants reads a comma-separated tenant list ("*" for all).
func ParseTenants(s string) ([]string, error) {
	var out []string
	for _, t := range strings.Split(s, ",") {
		t = strings.TrimSpace(t)
		if t == "" {
			continue
		}
		if len(t) > 128 || strings.ContainsAny(t, "|\x00\n\r") {
			return nil, inputErr("tenants", "%q is not a tenant name", t)
		}
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	if len(out) == 0 {
		return nil, inputErr("tenants", "name at least one tenant, or * for all")
	}
	if slices.Contains(out, AllTenants) {
		return []string{AllTenants}, nil
	}
	sort.Strings(out)
	return out, nil
}

// Operators manages operator accounts and API tokens. Every change is written together with its
// audit row, in one transaction.
type Operators struct {
	db     *gorm.DB
	argon  Argon2Params
	audit  *AuditLog
	dummy  string // a hash to check against when the name is unknown, so timing tells nothing
	tokens time.Duration

	// passwordChecks counts argon2 verifications Authenticate has run (tests prove the throttle
	// refuses before this work is spent).
	passwordChecks atomic.Int64
}

// NewOperators returns the operator directory on db. Its changes are audited in the log keyed
// from digestSecret (the deployment's digest secret; see NewAuditLog).
func NewOperators(db *gorm.DB, argon Argon2Params, digestSecret []byte) *Operators {
	if argon.MemoryKiB == 0 {
		argon = DefaultArgon2
	}
	dummy, _ := HashPassword("not-a-password-of-anyone", argon)
	return &Operators{db: db, argon: argon, audit: NewAuditLog(db, digestSecret), dummy: dummy}
}

// Change says who changes what, for the audit log.
type Change struct {
	Actor string // operator:NAME or cli:USER
	IP    string
	// Scope is the acting operator's tenants: a target outside them is not found (see covers).
	// nil for the CLI, which whoever holds the database runs.
	Scope []string
}

type operatorRow struct {
	ID           int64
	Name         string
	PasswordHash string
	Role         string
	Disabled     bool
	CreatedAt    time.Time
	LastLoginAt  *time.Time
	TimeZone     string
	Language     string
	Tenants      string // comma-joined
}

const operatorSelect = `SELECT o.id, o.name, o.password_hash, o.role, o.disabled, o.created_at, o.last_login_at, o.time_zone, o.language,
	COALESCE((SELECT string_agg(t.tenant, ',' ORDER BY t.tenant) FROM operator_tenants t WHERE t.operator_id = o.id), '') AS tenants
	FROM operators o`

func (r operatorRow) operator() *Operator {
	role, _ := ParseRole(r.Role)
	var tenants []string
	if r.Tenants != "" {
		tenants = strings.Split(r.Tenants, ",")
	}
	return &Operator{ID: r.ID, Name: r.Name, Role: role, Tenants: tenants, Disabled: r.Disabled,
		CreatedAt: r.CreatedAt, LastLoginAt: r.LastLoginAt, TimeZone: r.TimeZone, Language: r.Language}
}

func (d *Operators) one(ctx context.Context, where string, arg any) (*operatorRow, error) {
	var rows []operatorRow
	if err := d.db.WithContext(ctx).Raw(operatorSelect+" WHERE "+where, arg).Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("read operator: %w", err)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("operator: %w", ErrNotFound)
	}
	return &rows[0], nil
}

// ByName returns the operator called name.
func (d *Operators) ByName(ctx context.Context, name string) (*Operator, error) {
	r, err := d.one(ctx, "o.name = ?", name)
	if err != nil {
		return nil, err
	}
	return r.operator(), nil
}

// ByID returns the operator with id.
func (d *Operators) ByID(ctx context.Context, id int64) (*Operator, error) {
	r, err := d.one(ctx, "o.id = ?", id)
	if err != nil {
		return nil, err
	}
	return r.operator(), nil
}

// List returns every operator by name (bounded: operators are people, not rows of traffic).
func (d *Operators) List(ctx context.Context) ([]*Operator, error) {
	var rows []operatorRow
	if err := d.db.WithContext(ctx).Raw(operatorSelect + " ORDER BY o.name LIMIT 1000").Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("list operators: %w", err)
	}
	out := make([]*Operator, len(rows))
	for i, r := range rows {
		out[i] = r.operator()
	}
	return out, nil
}

// Authenticate checks name and password: ErrBadCredentials when either is wrong or the
// operator is disabled. It spends the same hashing work when the name is unknown.
func (d *Operators) Authenticate(ctx context.Context, name, password string) (*Operator, error) {
	if len(password) > maxPasswordLen {
		return nil, ErrBadCredentials
	}
	r, err := d.one(ctx, "o.name = ?", name)
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

// Add creates an operator. ErrConflict when the name is taken.
func (d *Operators) Add(ctx context.Context, ch Change, n NewOperator) (*Operator, error) {
	if !operatorName.MatchString(n.Name) {
		return nil, inputErr("name", "use 1–64 letters, digits, '.', '_', '@' or '-'")
	}
	if err := ValidatePassword(n.Password); err != nil {
		return nil, err
	}
	if n.Role == RoleNone {
		return nil, inputErr("role", "is required")
	}
	if len(n.Tenants) == 0 {
		return nil, inputErr("tenants", "name at least one tenant, or * for all")
	}
	hash, err := HashPassword(n.Password, d.argon)
	if err != nil {
		return nil, err
	}
	var id int64
	err = d.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Raw(`INSERT INTO operators (name, password_hash, role) VALUES (?, ?, ?) RETURNING id`,
			n.Name, hash, n.Role.String()).Scan(&id).Error; err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == "23505" {
				return errs.Errorf("operator %s: %w", n.Name, ErrConflict)
			}
			return fmt.Errorf("add operator: %w", err)
		}
		if err := setTenants(tx, id, n.Tenants); err != nil {
			return err
		}
		return d.audit.Append(ctx, tx, Entry{Actor: ch.Actor, IP: ch.IP, Action: "operator.add", Target: "operator:" + n.Name,
			Detail: map[string]any{"role": n.Role.String(), "tenants": n.Tenants}})
	})
	if err != nil {
		return nil, err
	}
	return d.ByID(ctx, id)
}

func setTenants(tx *gorm.DB, id int64, tenants []string) error {
	if err := tx.Exec(`DELETE FROM operator_tenants WHERE operator_id = ?`, id).Error; err != nil {
		return fmt.Errorf("set tenants: %w", err)
	}
	for _, t := range tenants {
		if err := tx.Exec(`INSERT INTO operator_tenants (operator_id, tenant) VALUES (?, ?)`, id, t).Error; err != nil {
			return fmt.Errorf("set tenants: %w", err)
		}
	}
	return nil
}

// SetAccess changes an operator's role and tenants; their sessions end so the change applies at
// once.
func (d *Operators) SetAccess(ctx context.Context, ch Change, name string, role Role, tenants []string) error {
	if role == RoleNone || len(tenants) == 0 {
		return inputErr("role", "role and tenants are required")
	}
	return d.update(ctx, ch, name, "operator.set_access", map[string]any{"role": role.String(), "tenants": tenants},
		func(tx *gorm.DB, id int64) error {
			if err := tx.Exec(`UPDATE operators SET role = ?, updated_at = now() WHERE id = ?`, role.String(), id).Error; err != nil {
				return err
			}
			if err := setTenants(tx, id, tenants); err != nil {
				return err
			}
			return tx.Exec(`DELETE FROM sessions WHERE operator_id = ?`, id).Error
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
	return d.update(ctx, ch, name, "operator.passwd", map[string]any{}, func(tx *gorm.DB, id int64) error {
		if err := tx.Exec(`UPDATE operators SET password_hash = ?, updated_at = now() WHERE id = ?`, hash, id).Error; err != nil {
			return err
		}
		return tx.Exec(`DELETE FROM sessions WHERE operator_id = ?`, id).Error
	})
}

// SetDisabled disables (ending sessions; tokens stop working) or re-enables an operator.
func (d *Operators) SetDisabled(ctx context.Context, ch Change, name string, disabled bool) error {
	action := "operator.enable"
	if disabled {
		action = "operator.disable"
	}
	return d.update(ctx, ch, name, action, map[string]any{}, func(tx *gorm.DB, id int64) error {
		if err := tx.Exec(`UPDATE operators SET disabled = ?, updated_at = now() WHERE id = ?`, disabled, id).Error; err != nil {
			return err
		}
		if !disabled {
			return nil
		}
		return tx.Exec(`DELETE FROM sessions WHERE operator_id = ?`, id).Error
	})
}

func (d *Operators) update(ctx context.Context, ch Change, name, action string, detail map[string]any, apply func(tx *gorm.DB, id int64) error) error {
	return d.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec(`SELECT pg_advisory_xact_lock(?)`, adminLockID).Error; err != nil {
			return fmt.Errorf("%s: lock: %w", action, err)
		}
		q, args := "o.name = ?", []any{name}
		if where, sargs := scopeWhere(ch.Scope); where != "" {
			q, args = q+" AND "+where, append(args, sargs...)
		}
		var rows []operatorRow
		if err := tx.Raw(operatorSelect+" WHERE "+q+" FOR UPDATE OF o", args...).Scan(&rows).Error; err != nil {
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
		return d.audit.Append(ctx, tx, Entry{Actor: ch.Actor, IP: ch.IP, Action: action, Target: "operator:" + name, Detail: detail})
	})
}

// SetTimeZone sets the zone operator id sees times in (audited as operator.time_zone); zone is
// checked by the caller (templates.LoadZone).
func (d *Operators) SetTimeZone(ctx context.Context, ch Change, id int64, zone string) error {
	return d.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var names []string
		if err := tx.Raw(`UPDATE operators SET time_zone = ?, updated_at = now() WHERE id = ? RETURNING name`, zone, id).Scan(&names).Error; err != nil {
			return fmt.Errorf("operator.time_zone: %w", err)
		}
		if len(names) == 0 {
			return fmt.Errorf("operator: %w", ErrNotFound)
		}
		return d.audit.Append(ctx, tx, Entry{Actor: ch.Actor, IP: ch.IP, Action: "operator.time_zone",
			Target: "operator:" + names[0], Detail: map[string]any{"time_zone": zone}})
	})
}

// tokenPrefix marks idemops API tokens, so a leaked one is recognizable in a secret scanner.
const tokenPrefix = "idemops_"

// hashSecret is the stored form of a session id or token: SHA-256, hex-encoded for the query
// (bound as text and decoded in SQL).
func hashSecret(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func randomSecret(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// CreateToken makes an API token for operator name, valid for ttl (0: no expiry), and returns
// the bearer secret; only its hash is stored, so it is shown once.
func (d *Operators) CreateToken(ctx context.Context, ch Change, name, label string, ttl time.Duration) (string, error) {
	label = strings.TrimSpace(label)
	if label == "" || len(label) > 64 {
		return "", inputErr("token name", "use 1–64 characters")
	}
	secret := tokenPrefix + randomSecret(32)
	var expires *time.Time
	if ttl > 0 {
		t := time.Now().Add(ttl)
		expires = &t
	}
	err := d.update(ctx, ch, name, "token.create", map[string]any{"token": label}, func(tx *gorm.DB, id int64) error {
		return tx.Exec(`INSERT INTO api_tokens (operator_id, name, token_hash, expires_at) VALUES (?, ?, decode(?, 'hex'), ?)`,
			id, label, hashSecret(secret), expires).Error
	})
	if err != nil {
		return "", err
	}
	return secret, nil
}

// ByToken returns the enabled operator owning a live bearer token.
func (d *Operators) ByToken(ctx context.Context, secret string) (*Operator, error) {
	if !strings.HasPrefix(secret, tokenPrefix) || len(secret) > 128 {
		return nil, ErrUnauthenticated
	}
	var ids []int64
	err := d.db.WithContext(ctx).Raw(`UPDATE api_tokens SET last_used_at = now()
		WHERE token_hash = decode(?, 'hex') AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())
		RETURNING operator_id`, hashSecret(secret)).Scan(&ids).Error
	if err != nil {
		return nil, fmt.Errorf("check token: %w", err)
	}
	if len(ids) == 0 {
		return nil, ErrUnauthenticated
	}
	o, err := d.ByID(ctx, ids[0])
	if err != nil || o.Disabled {
		return nil, ErrUnauthenticated
	}
	return o, nil
}
