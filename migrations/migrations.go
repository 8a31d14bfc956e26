// Package migrations holds the schema as goose SQL migrations, embedded in the binary. It is the
// only way the schema changes. Files are numbered by the package that owns their tables:
// 00001 claim, 00002 console, 00003 daemon, 00004 reconcile, 00005 retention, 00006 demo;
// later changes take the next free number.
package migrations

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"sort"
	"strings"

	"github.com/pressly/goose/v3"
)

//go:embed *.sql
var files embed.FS

// FS is the embedded migration files.
func FS() fs.FS { return files }

// Provider returns a goose provider for db over the embedded files. Migrations are numbered by
// owning package, so a database made before a lower-numbered file existed gets that file
// applied late instead of being refused (each file touches only its own tables).
func Provider(db *sql.DB) (*goose.Provider, error) {
	return goose.NewProvider(goose.DialectPostgres, db, files, goose.WithAllowOutofOrder(true))
}

// Up applies every pending migration.
func Up(ctx context.Context, db *sql.DB) error {
	p, err := Provider(db)
	if err != nil {
		return err
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("migrate up: %w", err)
	}
	return nil
}

// Hash identifies the schema the embedded migrations produce (used to name test templates).
func Hash() (string, error) {
	names, err := fs.Glob(files, "*.sql")
	if err != nil {
		return "", err
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		b, err := files.ReadFile(n)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", n, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// TenantRole is the role the console runs an operator's transactions as when the operator is
// limited to some tenants (internal/tenantdb): row-level security (migration 00118) shows it only
// those tenants' rows. It cannot log in; the console's own login switches to it per transaction,
// so that login must be a member of it.
const TenantRole = "idemops_console"

// GrantLock names the advisory lock, pg_advisory_xact_lock(hashtext(GrantLock)), that EnsureTenantRole
// holds in its database while it grants on every table. Each GRANT rewrites every table's
// pg_class row, so whatever else rewrites those rows while a console may be starting (the test
// rig's notify triggers: a table's first trigger sets relhastriggers) takes this lock first —
// otherwise one of the two fails with "tuple concurrently updated".
const GrantLock = "idemops tenant role"

// EnsureTenantRole makes TenantRole usable by db's login: the role exists, the login is a member
// of it, and the role has the schema's tables and sequences (the tables' owner runs this, so the
// grants are its to give). Creating the role and the membership needs a superuser or CREATEROLE;
// when the login has neither and they are missing, the error says what a superuser must run.
// It is idempotent and safe to run from several processes at once.
func EnsureTenantRole(ctx context.Context, db *sql.DB) error {
	// One transaction under a transaction-level lock: the processes doing this are serialized,
	// and nothing outlives the transaction. A session-level lock did not survive pgbouncer's
	// transaction pooling — its unlock could reach another server connection, leaving the lock
	// held by a pooled connection and every later console start waiting on it.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("tenant role: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit, a no-op
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, GrantLock); err != nil {
		return fmt.Errorf("tenant role: %w", err)
	}
	var user string
	var exists, member bool
	if err := tx.QueryRowContext(ctx, `SELECT current_user, EXISTS (SELECT FROM pg_roles WHERE rolname = $1),
		EXISTS (SELECT FROM pg_roles WHERE rolname = $1) AND pg_has_role(current_user, $1, 'MEMBER')`, TenantRole).Scan(&user, &exists, &member); err != nil {
		return fmt.Errorf("tenant role: %w", err)
	}
	fix := fmt.Sprintf("as a superuser run: CREATE ROLE %s NOLOGIN; GRANT %s TO %s;", TenantRole, TenantRole, quoteIdent(user))
	if !exists {
		if _, err := tx.ExecContext(ctx, `CREATE ROLE `+TenantRole+` NOLOGIN NOSUPERUSER NOBYPASSRLS`); err != nil {
			return fmt.Errorf("tenant role %s does not exist and %s cannot create it (%v): %s", TenantRole, user, err, fix)
		}
	}
	if !member {
		if _, err := tx.ExecContext(ctx, `GRANT `+TenantRole+` TO `+quoteIdent(user)); err != nil {
			return fmt.Errorf("%s is not a member of the tenant role %s and cannot make itself one (%v): %s", user, TenantRole, err, fix)
		}
	}
	for _, q := range []string{
		`GRANT USAGE ON SCHEMA public TO ` + TenantRole,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO ` + TenantRole,
		`GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO ` + TenantRole,
		`ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO ` + TenantRole,
		`ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT USAGE, SELECT, UPDATE ON SEQUENCES TO ` + TenantRole,
	} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("tenant role %s: %s: %w (the tables' owner must start the console)", TenantRole, q, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("tenant role: %w", err)
	}
	return nil
}

// quoteIdent quotes a role name for a statement that cannot take it as a parameter.
func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
