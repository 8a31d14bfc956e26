package access

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Every change of an operator writes the columns it means to and bumps updated_at: gorm drops a
// column its model may not write from an update without a word, so this is checked on the table.
func TestOperators_ChangesWriteTheirColumnsAndUpdatedAt(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	d := NewOperators(db, Argon2Params{MemoryKiB: 1024, Time: 1, Threads: 1}, audit.New(db, []byte("access-test-digest-secret-0123")))
	ch := Change{Actor: "cli:test"}
	o, err := d.Add(ctx, ch, NewOperator{Name: "ann", Password: "correct horse battery", Role: RoleViewer, Tenants: []string{"globex", "acme"}})
	if err != nil {
		t.Fatal(err)
	}
	if o.Role != RoleViewer || len(o.Tenants) != 2 || o.Tenants[0] != "acme" || o.TimeZone != "UTC" {
		t.Fatalf("added: %+v", o)
	}
	updated := func() (at time.Time) {
		t.Helper()
		if err := db.Raw(`SELECT updated_at FROM operators WHERE id = ?`, o.ID).Scan(&at).Error; err != nil {
			t.Fatal(err)
		}
		return at
	}
	last := updated()
	for name, change := range map[string]func() error{
		"access":    func() error { return d.SetAccess(ctx, ch, "ann", RoleAdmin, []string{"acme"}) },
		"password":  func() error { return d.SetPassword(ctx, ch, "ann", "another long password") },
		"disabled":  func() error { return d.SetDisabled(ctx, ch, "ann", true) },
		"time zone": func() error { return d.SetTimeZone(ctx, ch, o.ID, "Asia/Shanghai") },
		"language":  func() error { return d.SetLanguage(ctx, ch, o.ID, "zh-CN") },
	} {
		if err := db.Exec(`UPDATE operators SET updated_at = now() - interval '1 hour' WHERE id = ?`, o.ID).Error; err != nil {
			t.Fatal(err)
		}
		last = updated()
		if err := change(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !updated().After(last) {
			t.Errorf("%s: updated_at stayed %s", name, last)
		}
	}
	got, err := d.ByID(ctx, o.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Role != RoleAdmin || len(got.Tenants) != 1 || !got.Disabled || got.TimeZone != "Asia/Shanghai" || got.Language != "zh-CN" {
		t.Errorf("after the changes: %+v", got)
	}
	if _, err := d.Authenticate(ctx, "ann", "another long password"); err == nil {
		t.Error("a disabled operator signed in")
	}
}

// An operator's name is one name whatever its case: a second account differing only in case is
// a conflict, and sign-in and changes find the account by any case of its name (issue 35 item 7).
func TestOperators_NamesAreUniqueIgnoringCase(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	d := NewOperators(db, Argon2Params{MemoryKiB: 1024, Time: 1, Threads: 1}, audit.New(db, []byte("access-test-digest-secret-0123")))
	ch := Change{Actor: "cli:test"}
	boss, err := d.Add(ctx, ch, NewOperator{Name: "Boss@corp.example", Password: "correct horse battery", Role: RoleAdmin, Tenants: []string{"*"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.Add(ctx, ch, NewOperator{Name: "boss@corp.example", Password: "correct horse battery", Role: RoleViewer, Tenants: []string{"acme"}})
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("a name differing only in case: %v, want ErrConflict", err)
	}
	if o, err := d.Authenticate(ctx, "BOSS@corp.example", "correct horse battery"); err != nil || o.ID != boss.ID {
		t.Fatalf("sign-in by another case: %v, %+v", err, o)
	}
	if err := d.SetAccess(ctx, ch, "boss@CORP.example", RoleOperator, []string{"*"}); err == nil {
		t.Fatal("the last * admin was demoted through another case of its name")
	}
	if err := d.SetPassword(ctx, ch, "boss@CORP.example", "another long password"); err != nil {
		t.Fatal(err)
	}
	if o, err := d.Authenticate(ctx, "boss@corp.example", "another long password"); err != nil || o.Name != "Boss@corp.example" {
		t.Fatalf("after a change by another case: %v, %+v", err, o)
	}
}

// Single sign-on by e-mail refuses when more than one operator matches ignoring case, instead
// of signing the person in as whichever row the database returns first. The unique index makes
// that impossible; the test drops it to show the lookup does not depend on it.
func TestSSO_EmailMatchingTwoOperatorsIsRefused(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	d := NewOperators(db, Argon2Params{MemoryKiB: 1024, Time: 1, Threads: 1}, audit.New(db, []byte("access-test-digest-secret-0123")))
	pgtest.Exec(t, db, `DROP INDEX operators_name_lower_key`)
	pgtest.Exec(t, db, `INSERT INTO operators (name, password_hash, role) VALUES ('Boss@corp.example', 'x', 'admin'), ('boss@corp.example', 'x', 'viewer')`)
	pgtest.Exec(t, db, `INSERT INTO operator_tenants (operator_id, tenant) SELECT id, CASE role WHEN 'admin' THEN '*' ELSE 'acme' END FROM operators`)
	op, err := d.SignInSSO(ctx, "127.0.0.1", "boss@corp.example", nil, GroupMap{}, map[string]any{})
	if !errors.Is(err, ErrSSORefused) || !strings.Contains(err.Error(), "more than one operator") {
		t.Fatalf("sign-in matching two operators: %v, %+v; want a refusal", err, op)
	}
}
