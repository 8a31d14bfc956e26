package claim_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
	"github.com/idemops/idemops/keys"
)

func TestCheckNaturalKey_RefusesUserPlusProductOrAmount(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		fields []string
		bad    bool
	}{
		{[]string{"user_id", "article_id"}, false},
		{[]string{"tenant", "article_id", "user_id"}, false},
		{[]string{"user_id", "product_id"}, true},
		{[]string{"customer.id", "sku"}, true},
		{[]string{"user_id", "amount_minor"}, true},
		{[]string{"buyer_id", "price"}, true},
		{[]string{"order_no"}, false},
	} {
		err := claim.CheckNaturalKey(tc.fields)
		if got := errors.Is(err, claim.ErrNaturalKeyShape); got != tc.bad {
			t.Errorf("%v: %v, want refused=%v", tc.fields, err, tc.bad)
		}
	}
	// A domain key of that shape is refused at start-up (TestDomainKey_TheConstraintIsTheClaim).
}

type likeRow struct {
	ID     int64
	Tenant string
	UserID string
}

func TestDomainKey_TheConstraintIsTheClaim(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	pgtest.Exec(t, b.db, `CREATE TABLE nlikes (id bigserial PRIMARY KEY, tenant text NOT NULL, user_id text NOT NULL,
		article_id text NOT NULL, CONSTRAINT nlikes_one UNIQUE (tenant, user_id, article_id))`)
	dk := claim.DomainKey{Table: "nlikes", Constraint: "nlikes_one", Columns: []string{"tenant", "article_id", "user_id"}}
	if err := dk.Validate(ctx, b.db); err != nil {
		t.Fatal(err)
	}
	for name, bad := range map[string]claim.DomainKey{
		"no such constraint": {Table: "nlikes", Constraint: "nope", Columns: dk.Columns},
		"other columns":      {Table: "nlikes", Constraint: "nlikes_one", Columns: []string{"tenant", "user_id"}},
		"user + product":     {Table: "nlikes", Constraint: "nlikes_one", Columns: []string{"user_id", "product_id"}},
	} {
		if err := bad.Validate(ctx, b.db); err == nil {
			t.Errorf("%s: validated", name)
		}
	}

	row := map[string]any{"tenant": "t1", "user_id": "u7", "article_id": "a9"}
	var created atomic.Int64
	ids := make([]int64, 8)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var got likeRow
			ok, err := dk.Insert(ctx, b.db, row, &got)
			if err != nil {
				t.Error(err)
			}
			if ok {
				created.Add(1)
			}
			ids[i] = got.ID
		}()
	}
	wg.Wait()
	if created.Load() != 1 || b.count(`SELECT count(*) FROM nlikes`) != 1 {
		t.Fatalf("8 racing likes created %d rows", created.Load())
	}
	for _, id := range ids {
		if id != ids[0] || id == 0 {
			t.Fatalf("duplicates answered with ids %v, want the existing row's each time", ids)
		}
	}
	// Nothing in the keys table carries the rule: purging it changes nothing.
	pgtest.Exec(t, b.db, `DELETE FROM idempotency_keys`)
	var again likeRow
	if ok, err := dk.Insert(ctx, b.db, row, &again); err != nil || ok || again.ID != ids[0] {
		t.Fatalf("like after a purge: created=%v %v id %d, want the existing %d", ok, err, again.ID, ids[0])
	}
	// Unlike, then like: a new like.
	pgtest.Exec(t, b.db, `DELETE FROM nlikes WHERE id = ?`, ids[0])
	var fresh likeRow
	if ok, err := dk.Insert(ctx, b.db, row, &fresh); err != nil || !ok || fresh.ID == ids[0] {
		t.Fatalf("like after unlike: created=%v %v id %d", ok, err, fresh.ID)
	}
}

// TestNaturalKey_SurvivesAPurgeOfTheKeysTable: a natural key is a rule of the domain (one like
// per user per article), so it must outlive any purge of the keys table, and the business undo
// (an unlike) must free it. Declared the one way there is — a DomainKey on the domain table — the
// like is made once across a purge, and again only after the unlike.
func TestNaturalKey_SurvivesAPurgeOfTheKeysTable(t *testing.T) {
	b := setup(t)
	pgtest.Exec(t, b.db, `CREATE TABLE plikes (id bigserial PRIMARY KEY, tenant text NOT NULL, user_id text NOT NULL,
		article_id text NOT NULL, CONSTRAINT plikes_one UNIQUE (tenant, user_id, article_id))`)
	dk := claim.DomainKey{Table: "plikes", Constraint: "plikes_one", Columns: []string{"tenant", "user_id", "article_id"}}
	if err := dk.Validate(ctx, b.db); err != nil {
		t.Fatal(err)
	}
	likes := 0
	like := func() {
		t.Helper()
		var row likeRow
		made, err := dk.Insert(ctx, b.db, map[string]any{"tenant": "t1", "user_id": "7", "article_id": "a9"}, &row)
		if err != nil {
			t.Fatal(err)
		}
		if made {
			likes++
		}
	}
	like()
	// Every key the keys table holds goes, whatever its age.
	pgtest.Exec(t, b.db, `UPDATE idempotency_keys SET completed_at = now() - interval '400 days',
		updated_at = now() - interval '400 days', expires_at = now() - interval '1 day'`)
	if _, err := keys.DeleteExpiredKeys(ctx, b.db, keys.ExpiryRules{}, keys.ExpiryCursor{}, 100); err != nil {
		t.Fatal(err)
	}
	like()
	if likes != 1 {
		t.Fatalf("the same like was made %d times across a purge of the keys table; want 1", likes)
	}
	pgtest.Exec(t, b.db, `DELETE FROM plikes WHERE tenant = 't1' AND user_id = '7' AND article_id = 'a9'`) // the unlike
	like()
	if likes != 2 {
		t.Fatalf("after the unlike the like was made %d times in all; want 2", likes)
	}
}
