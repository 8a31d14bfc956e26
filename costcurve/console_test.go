package costcurve

import (
	"context"
	"encoding/json"
	"net/url"
	"strconv"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/keys"
)

// The console's paths, each through its HTTP handler (the operator's token or session, the
// scope check, the query, the rendering), so that they run under the same connection set-up as
// an operator's request does.

const samples = 200

// keyPage is the part of GET /api/v1/keys a benchmark checks.
type keyPage struct {
	Keys []struct {
		ID     int64  `json:"id"`
		Tenant string `json:"tenant"`
	} `json:"keys"`
	Next *string `json:"next_cursor"`
}

// keyPage reads one page of GET /api/v1/keys and checks it holds want keys (want < 0: some).
func (w *world) keyPage(b *testing.B, token, path string, want int) keyPage {
	var p keyPage
	if err := json.Unmarshal(w.api(b, token, path), &p); err != nil {
		b.Fatal(err)
	}
	if len(p.Keys) != want && (want >= 0 || len(p.Keys) == 0) {
		b.Fatalf("GET %s: %d keys, want %d", path, len(p.Keys), want)
	}
	return p
}

// cursorAt is the keyset cursor just after row i (ids are 1…n in created_at order).
func (w *world) cursorAt(i int) string {
	return keys.Cursor{CreatedAt: w.createdAt(i), ID: int64(i + 1)}.String()
}

// BenchmarkSearch: the key search's first page and a deep page (the middle of the table), for an
// administrator of every tenant and for a viewer of three of the 100, newest first. Target at
// 10M: p99 ≤ 10 ms.
func BenchmarkSearch(b *testing.B) {
	forEachSize(b, func(b *testing.B, w *world) {
		deep := "&after=" + url.QueryEscape(w.cursorAt(w.n/2))
		var worst time.Duration
		for _, c := range []struct {
			name, token, query string
			want               int // -1: some (a small world's three tenants may hold fewer than a page)
		}{
			{"all_first", w.adminToken, "", 50},
			{"all_deep", w.adminToken, deep, 50},
			{"scoped_first", w.scopedToken, "", 50},
			{"scoped_deep", w.scopedToken, deep, 50},
			{"all_state_first", w.adminToken, "&state=failed_final&operation=payment.charge", 50},
			{"scoped_state_deep", w.scopedToken, "&state=failed_final" + deep, -1},
		} {
			p99 := timings(b, c.name, 20, samples, func(int) { w.keyPage(b, c.token, "/api/v1/keys?limit=50"+c.query, c.want) })
			worst = max(worst, p99)
		}
		target(b, "search p99 (worst case)", worst, 10*time.Millisecond)
		b.ResetTimer()
		for range b.N {
			w.keyPage(b, w.adminToken, "/api/v1/keys?limit=50"+deep, 50)
		}
	})
}

// BenchmarkFindByKey: the header's find by raw key (POST /api/v1/keys/find), for random existing
// keys and missing ones, as an administrator of every tenant and as a viewer of three. Target
// at 10M: p99 ≤ 2 ms.
func BenchmarkFindByKey(b *testing.B) {
	forEachSize(b, func(b *testing.B, w *world) {
		find := func(token, key string, want int) {
			var p keyPage
			if err := json.Unmarshal(w.apiPost(b, token, "/api/v1/keys/find", `{"key":"`+key+`"}`), &p); err != nil {
				b.Fatal(err)
			}
			if len(p.Keys) != want && (want >= 0 || len(p.Keys) == 0) {
				b.Fatalf("find %s: %d keys, want %d", key, len(p.Keys), want)
			}
		}
		// Keys of the last 70% of the world: BenchmarkPurgeDay deletes its oldest day (3%) at
		// each run, and a kept world (IDEMOPS_BENCH_KEEP) serves several runs.
		pick := func(i int) int { return w.n*3/10 + int(mix(uint64(i)+99)%uint64(w.n-w.n*3/10)) }
		worst := timings(b, "existing", 20, samples, func(i int) { find(w.adminToken, "order-"+strconv.Itoa(pick(i)), 1) })
		worst = max(worst, timings(b, "missing", 20, samples, func(i int) { find(w.adminToken, "missing-"+strconv.Itoa(i), 0) }))
		worst = max(worst, timings(b, "scoped", 20, samples, func(i int) {
			k := pick(i)
			want := 0
			if t := k % tenants; t >= 1 && t <= 3 {
				want = 1
			}
			find(w.scopedToken, "order-"+strconv.Itoa(k), want)
		}))
		target(b, "find by key p99 (worst case)", worst, 2*time.Millisecond)
		b.ResetTimer()
		for i := range b.N {
			find(w.adminToken, "order-"+strconv.Itoa(pick(i)), 1)
		}
	})
}

// BenchmarkDashboard: the dashboard page (counts by operation and state of the keys created in
// the last 24 hours — a tenth of the table here —, open keys, expired leases, keys needing
// attention, claims per minute, the daemon's cards) for an administrator of every tenant and a
// viewer of three. Target at 10M: ≤ 50 ms whatever the day's volume.
func BenchmarkDashboard(b *testing.B) {
	forEachSize(b, func(b *testing.B, w *world) {
		w.catchUpFolds(b)
		worst := timings(b, "all", 5, samples/2, func(int) { w.page(b, w.adminCookies, "/") })
		worst = max(worst, timings(b, "scoped", 5, samples/2, func(int) { w.page(b, w.scopedCookies, "/") }))
		target(b, "dashboard p99 (worst case)", worst, 50*time.Millisecond)
		b.ResetTimer()
		for range b.N {
			w.page(b, w.adminCookies, "/")
		}
	})
}

// catchUpFolds folds the world's key counts (key_counts, migration 00137) until they reach the
// last minutes, as a live system's dashboard reads keep them, and logs what that cost: a fold
// counts at most an hour of minutes, so the first folds of a world count its last 25 hours once.
func (w *world) catchUpFolds(b *testing.B) {
	b.Helper()
	ctx := context.Background()
	start := time.Now()
	var folds int
	var longest time.Duration
	for folds = 0; folds < 40; folds++ {
		var behind bool
		if err := w.db.Raw(`SELECT settled_until < now() - interval '7 minutes' FROM key_count_folds`).Scan(&behind).Error; err != nil {
			b.Fatal(err)
		}
		if !behind {
			break
		}
		t := time.Now()
		if err := keys.FoldCounts(ctx, w.db); err != nil {
			b.Fatal(err)
		}
		longest = max(longest, time.Since(t))
	}
	var rows int64
	if err := w.db.Raw(`SELECT count(*) FROM key_counts`).Scan(&rows).Error; err != nil {
		b.Fatal(err)
	}
	b.Logf("key counts caught up: %d folds in %s (longest %s), %d rows of key_counts", folds,
		time.Since(start).Round(time.Millisecond), longest.Round(time.Millisecond), rows)
}

// BenchmarkAttention: the keys needing attention — the search page's first page filtered by
// attention=1 (about 0.5% of the keys), for every tenant and for three. Target: as search.
func BenchmarkAttention(b *testing.B) {
	forEachSize(b, func(b *testing.B, w *world) {
		worst := timings(b, "all", 20, samples, func(int) { w.keyPage(b, w.adminToken, "/api/v1/keys?attention=1&limit=50", 50) })
		worst = max(worst, timings(b, "scoped", 20, samples, func(int) {
			w.keyPage(b, w.scopedToken, "/api/v1/keys?attention=1&limit=50", -1)
		}))
		target(b, "attention p99 (worst case)", worst, 10*time.Millisecond)
		b.ResetTimer()
		for range b.N {
			w.keyPage(b, w.adminToken, "/api/v1/keys?attention=1&limit=50", 50)
		}
	})
}

// BenchmarkRetentionPreview: the retention page's dry run (GET /api/v1/retention/preview), for
// every operation and for one. Target at 10M: ≤ 200 ms.
func BenchmarkRetentionPreview(b *testing.B) {
	forEachSize(b, func(b *testing.B, w *world) {
		worst := timings(b, "all", 2, 20, func(int) { w.api(b, w.adminToken, "/api/v1/retention/preview") })
		worst = max(worst, timings(b, "one_operation", 2, 20, func(int) {
			w.api(b, w.adminToken, "/api/v1/retention/preview?operation=payment.charge")
		}))
		target(b, "retention preview p99 (worst case)", worst, 200*time.Millisecond)
		b.ResetTimer()
		for range b.N {
			w.api(b, w.adminToken, "/api/v1/retention/preview")
		}
	})
}

// BenchmarkFindingsGroups: the findings page as it opens (GET /reconcile/findings: the open
// findings grouped by kind × channel × bill day, with the state tabs' counts), for an
// administrator of every tenant and a viewer of three, over one finding per 100 keys (10k at
// 1M keys, 100k at 10M) spread over a year of bill days, four channels and six kinds, one in
// five closed. Target: p99 ≤ 100 ms (the findings page's, #32).
func BenchmarkFindingsGroups(b *testing.B) {
	forEachSize(b, func(b *testing.B, w *world) {
		if err := w.yearOfFindings(w.n / 100); err != nil {
			b.Fatal(err)
		}
		worst := timings(b, "all", 5, samples/2, func(int) { w.page(b, w.adminCookies, "/reconcile/findings") })
		worst = max(worst, timings(b, "scoped", 5, samples/2, func(int) { w.page(b, w.scopedCookies, "/reconcile/findings") }))
		target(b, "findings groups p99 (worst case)", worst, 100*time.Millisecond)
		b.ResetTimer()
		for range b.N {
			w.page(b, w.adminCookies, "/reconcile/findings")
		}
	})
}

// yearOfFindings replaces the world's findings by n of a year of reconciliation runs: keys'
// findings (their tenant from the key) over 365 bill days, four channels, six kinds, a fifth
// of them closed. The statement triggers keep discrepancy_groups, as for any writer.
func (w *world) yearOfFindings(n int) error {
	return w.db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec(`TRUNCATE statements, statement_lines, recon_runs, discrepancies CASCADE`).Error; err != nil {
			return err
		}
		var run int64
		if err := tx.Raw(`INSERT INTO recon_runs (channel, bill_date, status, actor) VALUES ('stripe', ?, 'succeeded', 'operator:bench')
			RETURNING id`, w.billDay).Scan(&run).Error; err != nil {
			return err
		}
		if err := tx.Exec(`INSERT INTO discrepancies (run_id, first_run_id, channel, bill_date, kind, subject, detail, key_id, state)
			SELECT ?, ?, (ARRAY['wechat','alipay','stripe','adyen'])[1 + i % 4], ?::date - (i / 4) % 365,
			       (ARRAY['LOCAL_ONLY','CHANNEL_ONLY','AMOUNT_MISMATCH','STATUS_MISMATCH','DUPLICATE_AT_CHANNEL','FEE_MISMATCH'])[1 + (i / 1460) % 6],
			       'key:' || k.id,
			       jsonb_build_object('merchant_order_no', k.downstream_key, 'channel_amount_minor', k.amount_minor, 'channel_currency', 'USD'),
			       k.id, CASE WHEN (i / 11) % 5 = 0 THEN 'resolved' ELSE 'open' END
			FROM generate_series(1, ?) i JOIN idempotency_keys k ON k.id = 1 + (i::bigint * 7919) % ?`,
			run, run, w.billDay, n, w.n).Error; err != nil {
			return err
		}
		return tx.Exec(`ANALYZE discrepancies; ANALYZE discrepancy_groups`).Error
	})
}
