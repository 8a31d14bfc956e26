package access

import (
	"context"
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
