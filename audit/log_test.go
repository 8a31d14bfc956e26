package audit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// testSecret is the deployment's digest secret in these tests.
var testSecret = []byte("audit-test-digest-secret-0123456789")

// bundle is one test's audit log on a database of its own.
type bundle struct {
	t   *testing.T
	db  *gorm.DB
	log *Log
}

func setup(t *testing.T) *bundle {
	t.Helper()
	db := pgtest.New(t)
	return &bundle{t: t, db: db, log: New(db, testSecret)}
}

func (b *bundle) appendAudit(n int) {
	b.t.Helper()
	for i := 0; i < n; i++ {
		if err := b.log.Append(context.Background(), nil, Entry{Actor: "operator:t", Action: "test.action",
			Target: fmt.Sprintf("key:%d", i), Tenants: []string{"acme"}, Detail: map[string]any{"i": i}}); err != nil {
			b.t.Fatal(err)
		}
	}
}

// tamper runs sql on audit_log with its append-only triggers switched off, as the table's
// owner could.
func (b *bundle) tamper(sql string) {
	b.t.Helper()
	err := b.db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec(`ALTER TABLE audit_log DISABLE TRIGGER USER`).Error; err != nil {
			return err
		}
		if err := tx.Exec(sql).Error; err != nil {
			return err
		}
		return tx.Exec(`ALTER TABLE audit_log ENABLE TRIGGER USER`).Error
	})
	if err != nil {
		b.t.Fatal(err)
	}
}

func TestAudit_AppendOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.appendAudit(3)
	for _, sql := range []string{`UPDATE audit_log SET actor = 'x' WHERE seq = 2`, `DELETE FROM audit_log WHERE seq = 3`, `TRUNCATE audit_log`} {
		if err := b.db.Exec(sql).Error; err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Errorf("%s: err %v, want the append-only trigger to refuse it", sql, err)
		}
	}
}

func TestAudit_VerifyFindsTheFirstBadRow(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		tamper string
		bad    int64
	}{
		"intact":       {"", 0},
		"edited":       {`UPDATE audit_log SET detail = '{"i":99}' WHERE seq = 3`, 3},
		"deleted":      {`DELETE FROM audit_log WHERE seq = 2`, 3},
		"rehashed":     {`UPDATE audit_log SET actor = 'operator:mallory', hash = repeat('a', 64) WHERE seq = 2`, 2},
		"forged chain": {`UPDATE audit_log SET prev_hash = repeat('b', 64) WHERE seq = 4`, 4},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.appendAudit(5)
			if tc.tamper != "" {
				b.tamper(tc.tamper)
			}
			res, err := b.log.Verify(context.Background(), VerifyOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if res.BadSeq != tc.bad {
				t.Errorf("first bad row %d (%s), want %d", res.BadSeq, res.Reason, tc.bad)
			}
		})
	}
}

// rechain rewrites the chain's rows from..to as an attacker with write access to the table but
// without the key would: rows are edited by mutate (which may drop them by returning false),
// renumbered without gaps, and every hash recomputed with hash. Rows after `to` stay as they are.
func (b *bundle) rechain(from, to int64, mutate func(r *Row) bool, hash func(r Row) (string, string)) {
	b.t.Helper()
	var rows []Row
	if err := b.db.Raw(`SELECT ` + rowColumns + ` FROM audit_log ORDER BY seq`).Scan(&rows).Error; err != nil {
		b.t.Fatal(err)
	}
	err := b.db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec(`ALTER TABLE audit_log DISABLE TRIGGER USER`).Error; err != nil {
			return err
		}
		if err := tx.Exec(`DELETE FROM audit_log WHERE seq >= ?`, from).Error; err != nil {
			return err
		}
		prev, seq := genesisHash, int64(0)
		for _, r := range rows {
			if r.Seq < from {
				prev, seq = r.Hash, r.Seq
				continue
			}
			if r.Seq <= to {
				if mutate != nil && !mutate(&r) {
					continue
				}
				seq++
				r.Seq, r.PrevHash = seq, prev
				r.Hash, r.Alg = hash(r)
				prev = r.Hash
			}
			if err := b.log.insert(tx, r); err != nil {
				return err
			}
		}
		return tx.Exec(`ALTER TABLE audit_log ENABLE TRIGGER USER`).Error
	})
	if err != nil {
		b.t.Fatal(err)
	}
}

// end is "to the end of the chain" for rechain.
const end = 1 << 62

// The ways an attacker without the key can recompute a row's hash.
var (
	unkeyed = func(r Row) (string, string) {
		r.Alg = algSHA256
		return chainHash(r), algSHA256
	}
	wrongKey = func(r Row) (string, string) {
		r.Alg = algHMACTenants
		return New(nil, []byte("a guessed secret, not the deployment's")).seal(r), algHMACTenants
	}
)

func (b *bundle) verify(opt VerifyOptions) VerifyResult {
	b.t.Helper()
	res, err := b.log.Verify(context.Background(), opt)
	if err != nil {
		b.t.Fatal(err)
	}
	return res
}

func (b *bundle) checkpoint() Head {
	b.t.Helper()
	res := b.verify(VerifyOptions{})
	if !res.OK() {
		b.t.Fatalf("chain broken before tampering: %d %s", res.BadSeq, res.Reason)
	}
	return res.Head
}

func wantBroken(t *testing.T, name string, res VerifyResult, seq int64, reason string) {
	t.Helper()
	if res.BadSeq != seq || !strings.Contains(res.Reason, reason) {
		t.Errorf("%s: first bad row %d (%s); want %d with %q", name, res.BadSeq, res.Reason, seq, reason)
	}
}

func TestAudit_RowsAreSealedWithAKeyNotInTheDatabase(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.appendAudit(3)
	var alg, hash string
	b.db.Raw(`SELECT alg, hash FROM audit_log WHERE seq = 2`).Row().Scan(&alg, &hash)
	var r Row
	b.db.Raw(`SELECT ` + rowColumns + ` FROM audit_log WHERE seq = 2`).Scan(&r)
	if alg != algHMACTenants || hash == chainHash(r) || hash != b.log.seal(r) {
		t.Errorf("row 2: alg %s, hash %s; want an HMAC seal, not the unkeyed hash", alg, hash)
	}
	if err := New(b.db, nil).Append(context.Background(), nil, Entry{Actor: "x", Action: "y"}); err == nil {
		t.Error("a log without the secret appended a row")
	}
}

// Case 1: the newest rows are deleted. The chain that is left is intact, so only a checkpoint
// shows it; without one, Verify says it could not tell.
func TestAudit_DeletedNewestRowsAreDetectedAgainstTheCheckpoint(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.appendAudit(10)
	head := b.checkpoint()
	if head.Seq != 10 {
		t.Fatalf("head %v", head)
	}
	b.tamper(`DELETE FROM audit_log WHERE seq >= 8`)

	res := b.verify(VerifyOptions{})
	if !res.OK() || res.Head.Seq != 7 || !strings.Contains(res.Unverified, "deletion of the newest rows cannot be detected") {
		t.Errorf("no checkpoint: %+v; want intact up to 7 and a note that truncation was not verified", res)
	}
	wantBroken(t, "--expect-head", b.verify(VerifyOptions{ExpectHead: &head}), 8, "newest rows (8–10) were deleted")
	wantBroken(t, "--expect-min-seq", b.verify(VerifyOptions{MinSeq: head.Seq}), 8, "newest rows were deleted")

	// The console keeps appending after the deletion, past the checkpoint's sequence: the row at
	// the checkpoint's sequence is now another row.
	b.appendAudit(5)
	wantBroken(t, "--expect-head after new rows", b.verify(VerifyOptions{ExpectHead: &head}), 10, "is not the checkpoint's")
}

// Case 2: a range in the middle is deleted — left as a gap, or renumbered and re-chained.
func TestAudit_DeletedRangeIsDetected(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		rechain func(b *bundle)
		bad     int64
		reason  string
	}{
		"gap": {func(b *bundle) { b.tamper(`DELETE FROM audit_log WHERE seq BETWEEN 4 AND 6`) }, 7, "rows are missing"},
		"renumbered, unkeyed": {func(b *bundle) {
			b.rechain(4, end, func(r *Row) bool { return r.Seq > 6 }, unkeyed)
		}, 4, "unkeyed row after keyed rows"},
		"renumbered, wrong key": {func(b *bundle) {
			b.rechain(4, end, func(r *Row) bool { return r.Seq > 6 }, wrongKey)
		}, 4, "seal does not match"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.appendAudit(10)
			head := b.checkpoint()
			tc.rechain(b)
			wantBroken(t, "no checkpoint", b.verify(VerifyOptions{}), tc.bad, tc.reason)
			wantBroken(t, "--expect-head", b.verify(VerifyOptions{ExpectHead: &head}), tc.bad, tc.reason)
		})
	}
}

// Case 3: a row is edited and the chain recomputed from it to the end (or from the start, so no
// keyed row is left to contradict it).
func TestAudit_EditedAndRecomputedChainIsDetected(t *testing.T) {
	t.Parallel()
	edit := func(r *Row) bool {
		if r.Seq == 3 {
			r.Actor = "operator:mallory"
		}
		return true
	}
	for name, tc := range map[string]struct {
		from   int64
		hash   func(Row) (string, string)
		bad    int64
		reason string
	}{
		"unkeyed from the row":   {3, unkeyed, 3, "unkeyed row after keyed rows"},
		"wrong key from the row": {3, wrongKey, 3, "seal does not match"},
		"wrong key from row 1":   {1, wrongKey, 1, "seal does not match"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.appendAudit(10)
			head := b.checkpoint()
			b.rechain(tc.from, end, edit, tc.hash)
			wantBroken(t, "no checkpoint", b.verify(VerifyOptions{}), tc.bad, tc.reason)
			wantBroken(t, "--expect-head", b.verify(VerifyOptions{ExpectHead: &head}), tc.bad, tc.reason)
		})
	}
	t.Run("whole chain recomputed unkeyed", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.appendAudit(10)
		head := b.checkpoint()
		b.rechain(1, end, edit, unkeyed)
		// Indistinguishable from a log that predates the keyed chain — and said so.
		if res := b.verify(VerifyOptions{}); !res.OK() || !strings.Contains(res.Unverified, "all 10 rows predate the keyed chain") {
			t.Errorf("no checkpoint: %+v; want the note that nothing is keyed", res)
		}
		wantBroken(t, "--expect-head", b.verify(VerifyOptions{ExpectHead: &head}), 10, "is not the checkpoint's")
	})
}

// Rows written before migration 00020 stay verifiable: an unkeyed prefix, held by the first
// keyed row after it.
func TestAudit_LegacyPrefixStaysVerifiable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.appendAudit(4)
	b.rechain(1, end, nil, unkeyed) // as the code before the keyed chain wrote them
	b.appendAudit(3)
	res := b.verify(VerifyOptions{})
	if !res.OK() || res.Rows != 7 || res.Legacy != 4 || !strings.Contains(res.Unverified, "rows 1–4 predate the keyed chain") {
		t.Fatalf("legacy prefix: %+v", res)
	}
	// Editing a legacy row and recomputing the unkeyed prefix changes row 4's hash, which the
	// keyed row 5 sealed as its previous hash.
	b.rechain(2, 4, func(r *Row) bool {
		if r.Seq == 2 {
			r.Detail = `{"i":7}`
		}
		return true
	}, unkeyed)
	wantBroken(t, "legacy rewritten", b.verify(VerifyOptions{}), 5, "previous-row hash does not match")
}

func TestAudit_IncrementalVerifyResumesFromAHead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.appendAudit(5)
	head := b.checkpoint()
	b.appendAudit(3)
	res := b.verify(VerifyOptions{From: &head})
	if !res.OK() || res.Rows != 3 || res.Head.Seq != 8 {
		t.Errorf("resume: %+v", res)
	}
	b.tamper(`DELETE FROM audit_log WHERE seq >= 5`)
	wantBroken(t, "resume after truncation", b.verify(VerifyOptions{From: &head}), 5, "not the one verified before")
}

func TestParseHead(t *testing.T) {
	t.Parallel()
	h := strings.Repeat("ab", 32)
	if got, err := ParseHead("12:" + strings.ToUpper(h)); err != nil || got.Seq != 12 || got.Hash != h {
		t.Errorf("good head: %v %v", got, err)
	}
	for _, bad := range []string{"", "12", "x:" + h, "0:" + h, "-1:" + h, "12:" + h[:63], "12:" + h[:62] + "zz", "12:" + h + "00"} {
		if _, err := ParseHead(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// A row's tenants are inside its seal: moving a row to other tenants (so that another
// administrator reads it, or its own no longer does) breaks the chain at that row.
func TestAudit_TenantsAreSealed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.appendAudit(4)
	if res := b.verify(VerifyOptions{}); !res.OK() || res.UnsealedTenants != 0 || res.Unverified != "no checkpoint given, so a deletion of the newest rows cannot be detected" {
		t.Fatalf("intact: %+v", res)
	}
	b.tamper(`UPDATE audit_log SET tenants = '{globex}' WHERE seq = 3`)
	wantBroken(t, "tenants moved", b.verify(VerifyOptions{}), 3, "seal does not match")
}

// Rows sealed before their tenants were (migration 00116 filled those in from their targets)
// stay verifiable: their seal covers what it covered, the single tenant column; Verify says
// their tenants are outside the chain, and the first row sealed with tenants holds them.
func TestAudit_RowsSealedBeforeTheirTenantsStayVerifiable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.appendAudit(4)
	asBefore := func(r Row) (string, string) { // as the code before migration 00116 sealed a row
		r.Alg = algHMAC
		return b.log.seal(r), algHMAC
	}
	b.rechain(1, end, func(r *Row) bool { r.Tenant = "acme"; return true }, asBefore)
	b.appendAudit(3)
	res := b.verify(VerifyOptions{})
	if !res.OK() || res.Rows != 7 || res.UnsealedTenants != 4 ||
		!strings.Contains(res.Unverified, "the tenants of 4 rows written before tenants were sealed were filled in afterwards") {
		t.Fatalf("rows sealed without tenants, then with: %+v", res)
	}
	// Their seal still covers the old tenant column.
	b.tamper(`UPDATE audit_log SET tenant = 'globex' WHERE seq = 2`)
	wantBroken(t, "old tenant edited", b.verify(VerifyOptions{}), 2, "seal does not match")
	b.tamper(`UPDATE audit_log SET tenant = 'acme' WHERE seq = 2`)
	// A row sealed without tenants after one sealed with them is a recomputed chain.
	b.rechain(6, 6, nil, asBefore)
	wantBroken(t, "downgraded row", b.verify(VerifyOptions{}), 6, "sealed without its tenants after rows sealed with them")
}

// An administrator of some tenants reads the rows whose tenants are all theirs: not a row that
// also names another tenant, not a "*" row; the tenant filter keeps rows naming that tenant.
func TestAudit_ListShowsRowsWithinTheReadersTenants(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	for i, ts := range [][]string{{"acme"}, {"globex", "acme"}, nil, {"globex"}, {"acme", "*"}, {"initech"}} {
		if err := b.log.Append(ctx, nil, Entry{Actor: "operator:t", Action: "test.action", Target: fmt.Sprintf("key:%d", i+1), Tenants: ts}); err != nil {
			t.Fatal(err)
		}
	}
	for name, tc := range map[string]struct {
		f    Filter
		want string
	}{
		"acme's admin":         {Filter{Scope: []string{"acme"}}, "key:1"},
		"acme+globex's admin":  {Filter{Scope: []string{"acme", "globex"}}, "key:4 key:2 key:1"},
		"* admin":              {Filter{Scope: []string{"*"}}, "key:6 key:5 key:4 key:3 key:2 key:1"},
		"the CLI":              {Filter{}, "key:6 key:5 key:4 key:3 key:2 key:1"},
		"tenant globex, for *": {Filter{Tenant: "globex"}, "key:4 key:2"},
		"tenant globex, acme":  {Filter{Tenant: "globex", Scope: []string{"acme"}}, ""},
	} {
		rows, _, err := b.log.List(ctx, tc.f)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range rows {
			got = append(got, r.Target)
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("%s: %v, want %s", name, got, tc.want)
		}
	}
	rows, _, _ := b.log.List(ctx, Filter{Target: "key:5"})
	if len(rows) != 1 || strings.Join(rows[0].Tenants, ",") != "*" {
		t.Errorf("a row naming * among others: %+v, want tenants [*]", rows)
	}
}

// TestAudit_AppendBatchExtendsTheOneChain: a batch (more rows than one statement takes) lands
// after the rows before it, in order, sealed like single rows, in the caller's transaction: a
// rollback leaves none of it, and the chain verifies across both.
func TestAudit_AppendBatchExtendsTheOneChain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.appendAudit(2)
	batch := make([]Entry, 2*appendRows+5)
	for i := range batch {
		batch[i] = Entry{Actor: "operator:bulk", Action: "reconcile.finding.ignore", Target: fmt.Sprintf("finding:%d", i),
			Tenants: []string{"acme"}, Detail: map[string]any{"i": i}}
	}
	err := b.db.Transaction(func(tx *gorm.DB) error {
		if err := b.log.AppendBatch(ctx, tx, batch); err != nil {
			t.Fatal(err)
		}
		return errors.New("roll back")
	})
	if err == nil {
		t.Fatal("the transaction committed")
	}
	var n int64
	b.db.Raw(`SELECT count(*) FROM audit_log`).Scan(&n)
	if n != 2 {
		t.Fatalf("%d rows after a rolled back batch, want 2", n)
	}
	if err := b.db.Transaction(func(tx *gorm.DB) error { return b.log.AppendBatch(ctx, tx, batch) }); err != nil {
		t.Fatal(err)
	}
	b.appendAudit(1)
	res, err := b.log.Verify(ctx, VerifyOptions{})
	if err != nil || !res.OK() || res.Rows != int64(len(batch))+3 {
		t.Fatalf("verify: %+v %v; want %d rows, intact", res, err, len(batch)+3)
	}
	var targets []string
	b.db.Raw(`SELECT target FROM audit_log WHERE seq BETWEEN 3 AND 5 ORDER BY seq`).Scan(&targets)
	if strings.Join(targets, " ") != "finding:0 finding:1 finding:2" {
		t.Fatalf("batch rows out of order: %v", targets)
	}
}
