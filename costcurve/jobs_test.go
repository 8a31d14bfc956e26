package costcurve

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/money"
	"github.com/idemops/idemops/reconcile"
	"github.com/idemops/idemops/retention"
)

// The daemon's paths: the reclaimer's scan, the purge of a day, reconciliation's matching.

// BenchmarkReclaimScan: the reclaimer's takeover statement when no lease has expired (every
// processing key's lease is live), the daemon's most frequent statement. Target at 10M: ≤ 1 ms.
func BenchmarkReclaimScan(b *testing.B) {
	forEachSize(b, func(b *testing.B, w *world) {
		ctx := context.Background()
		st, err := claim.NewStore(w.db, claim.Config{DigestSecret: benchSecret, Owner: "bench-daemon"})
		if err != nil {
			b.Fatal(err)
		}
		scan := func(int) {
			ls, err := st.TakeoverExpired(ctx, 100, daemon.ReclaimActor)
			if err != nil || len(ls) != 0 {
				b.Fatalf("takeover: %d leases, %v; want none", len(ls), err)
			}
		}
		p99 := timings(b, "empty_scan", 20, samples, scan)
		target(b, "reclaim empty scan p99", p99, time.Millisecond)
		b.ResetTimer()
		for i := range b.N {
			scan(i)
		}
	})
}

// BenchmarkPurgeDay: the purge job deleting the keys of the oldest remaining day (about 3% of
// the table; their expiry set to an hour ago first, outside the timing). Target: ≥ 100k rows/s.
func BenchmarkPurgeDay(b *testing.B) {
	forEachSize(b, func(b *testing.B, w *world) {
		ctx := context.Background()
		job, err := retention.NewPurgeJob(w.db, retention.Config{})
		if err != nil {
			b.Fatal(err)
		}
		var deleted int64
		var took time.Duration
		for range b.N {
			b.StopTimer()
			var first time.Time
			// The oldest key a purge can take: keys without an expiry stay, and on a kept world
			// an earlier run's day is gone but its unexpiring keys are still the oldest.
			if err := w.db.Raw(`SELECT min(created_at) FROM idempotency_keys WHERE expires_at IS NOT NULL`).Scan(&first).Error; err != nil {
				b.Fatal(err)
			}
			res := w.db.Exec(`UPDATE idempotency_keys SET expires_at = now() - interval '1 hour'
				WHERE created_at < ? AND expires_at IS NOT NULL`, first.Add(24*time.Hour))
			if res.Error != nil {
				b.Fatal(res.Error)
			}
			due := res.RowsAffected
			// Open reconciliation findings, as a live system has (one per 5,000 keys, on the
			// bill day's keys, not the purged day's): every key a purge deletes is checked
			// against them.
			if err := w.openFindings(w.n / 5000); err != nil {
				b.Fatal(err)
			}
			// Steady state: earlier runs brought the stamp cursor up to now.
			if err := w.db.Exec(`UPDATE retention_settings SET stamp_cursor_at = now()`).Error; err != nil {
				b.Fatal(err)
			}
			if err := w.db.Exec(`VACUUM ANALYZE idempotency_keys`).Error; err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			t := time.Now()
			rep, err := job.Purge(ctx, retention.Options{Actor: "operator:bench"}, nil)
			took += time.Since(t)
			if err != nil {
				b.Fatal(err)
			}
			if rep.Deleted != due {
				b.Fatalf("purge deleted %d keys, want the day's %d", rep.Deleted, due)
			}
			deleted += rep.Deleted
		}
		rate := float64(deleted) / took.Seconds()
		b.ReportMetric(float64(deleted)/float64(b.N), "rows")
		b.ReportMetric(rate, "rows/s")
		verdict := "meets"
		if rate < 100_000 {
			verdict = "MISSES"
		}
		b.Logf("purge of a day: %d keys in %s, %.0f rows/s (%s the target ≥ 100k rows/s)", deleted, took.Round(time.Millisecond), rate, verdict)
	})
}

// openFindings makes n open LOCAL_ONLY findings (one reconciliation run) on keys of the bill day,
// replacing any the world has.
func (w *world) openFindings(n int) error {
	return w.db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec(`TRUNCATE statements, statement_lines, recon_runs, discrepancies CASCADE`).Error; err != nil {
			return err
		}
		var run int64
		if err := tx.Raw(`INSERT INTO recon_runs (channel, bill_date, status, actor) VALUES ('stripe', ?, 'succeeded', 'operator:bench')
			RETURNING id`, w.billDay).Scan(&run).Error; err != nil {
			return err
		}
		return tx.Exec(`INSERT INTO discrepancies (run_id, first_run_id, channel, bill_date, kind, subject, key_id)
			SELECT ?, ?, 'stripe', ?, 'LOCAL_ONLY', 'key:' || id, id FROM idempotency_keys
			WHERE id > ? ORDER BY id LIMIT ?`, run, run, w.billDay, w.n*8/10, n).Error
	})
}

// BenchmarkReconcile: the bill day's statement (a Stripe report listing every completed
// payment.charge key of the day — a tenth of the table —, every thousandth a cent off, and one
// line in a thousand the keys do not know) imported, then matched. The import (parse + COPY) is
// the least a reconciliation must do; the target is matching in ≤ 2× the import's time at 10M
// keys, i.e. matching's cost follows the statement's lines, not the keys table.
func BenchmarkReconcile(b *testing.B) {
	forEachSize(b, func(b *testing.B, w *world) {
		ctx := context.Background()
		dir := b.TempDir()
		path := filepath.Join(dir, "stripe.csv")
		lines, err := w.writeStatement(path)
		if err != nil {
			b.Fatal(err)
		}
		r, err := reconcile.New(w.db, reconcile.Config{Sources: reconcile.SourcePolicy{FileRoot: dir}})
		if err != nil {
			b.Fatal(err)
		}
		ms := reconcile.MatchSettings{Operations: []string{"payment.charge"}, Location: time.UTC, Grace: 10 * time.Minute}
		var imp, match time.Duration
		var res *reconcile.MatchResult
		for range b.N {
			b.StopTimer()
			if err := w.db.Exec(`TRUNCATE statements, statement_lines, recon_runs, discrepancies CASCADE`).Error; err != nil {
				b.Fatal(err)
			}
			runID, err := r.StartRun(ctx, nil, "stripe", w.billDay.Format(time.DateOnly), "operator:bench")
			if err != nil {
				b.Fatal(err)
			}
			f, err := os.Open(path)
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			t := time.Now()
			ir, err := r.Import(ctx, reconcile.ImportRequest{Channel: "stripe", Format: "stripe", BillDate: w.billDay.Format(time.DateOnly),
				Importer: "operator:bench"}, bufio.NewReaderSize(f, 1<<20), daemon.NopProgress{})
			imp += time.Since(t)
			f.Close()
			if err != nil {
				b.Fatal(err)
			}
			t = time.Now()
			res, err = r.Match(ctx, runID, ir.StatementID, ms)
			match += time.Since(t)
			if err != nil {
				b.Fatal(err)
			}
		}
		if res.Lines != int64(lines) {
			b.Fatalf("matched %d lines of %d", res.Lines, lines)
		}
		n := float64(b.N)
		ratio := match.Seconds() / imp.Seconds()
		b.ReportMetric(float64(lines), "lines")
		b.ReportMetric(imp.Seconds()/n, "import_s")
		b.ReportMetric(match.Seconds()/n, "match_s")
		b.ReportMetric(ratio, "match/import")
		verdict := "meets"
		if ratio > 2 {
			verdict = "MISSES"
		}
		b.Logf("%d lines against %d keys: import %.2f s, match %.2f s, ratio %.2f (%s the target ≤ 2); findings %v",
			lines, w.n, imp.Seconds()/n, match.Seconds()/n, ratio, verdict, res.Counts)
	})
}

const stripeHeader = "balance_transaction_id,created_utc,currency,gross,fee,net,reporting_category,source_id,charge_id,payment_intent_id,payment_metadata[order_no]"

// writeStatement writes the bill day's Stripe report and returns its order lines.
func (w *world) writeStatement(path string) (int, error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 1<<20)
	fmt.Fprintln(bw, stripeHeader)
	lines := 0
	line := func(order string, at time.Time, amount int64, i int) {
		fee := amount * 3 / 100
		fmt.Fprintf(bw, "txn_%d,%s,usd,%s,%s,%s,charge,ch_%d,ch_%d,pi_%d,%s\n", i, at.Format(time.DateTime),
			money.Format(amount, "USD"), money.Format(fee, "USD"), money.Format(amount-fee, "USD"), i, i, i, order)
		lines++
	}
	for i := w.n * 8 / 10; i < w.n*9/10; i++ {
		if w.stateOf(i) != claim.StateCompleted {
			continue
		}
		amount := amountOf(i)
		if i%1000 == 7 {
			amount++
		}
		line(fmt.Sprintf("ORD-%010d", i), w.createdAt(i).Add(time.Second), amount, i)
		if i%1000 == 500 {
			line(fmt.Sprintf("ORD-X%09d", i), w.createdAt(i).Add(time.Second), 1234, w.n+i)
		}
	}
	if err := bw.Flush(); err != nil {
		return 0, err
	}
	return lines, f.Close()
}
