package cells_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/idemops/idemops/cells"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/internal/testinfra/benchload"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

// BenchmarkMove moves a tenant with IDEMOPS_BENCH_MOVE_KEYS completed keys (default 10,000, each
// with its stored answer) from cell a to cell b, two databases on the test server, and reports
// the move's time and its freeze window (the tenant's claims answer 503 from the freeze to the
// switch). Each step's line goes to stdout.
func BenchmarkMove(b *testing.B) {
	n := benchload.EnvInt("IDEMOPS_BENCH_MOVE_KEYS", 10000)
	path := twoCellsB(b)
	m, err := cells.Load(path)
	if err != nil {
		b.Fatal(err)
	}
	set, err := cells.Open(context.Background(), m, cells.Options{Migrate: true, Claim: claim.Config{DigestSecret: secret, Owner: "bench"}})
	if err != nil {
		b.Fatal(err)
	}
	defer set.Close()
	a, _ := set.Cell("a")
	snap := &claim.Snapshot{Status: 201, Headers: map[string]string{"Content-Type": "application/json"}, Body: []byte(`{"payment_id":"p_1","status":"succeeded"}`)}
	benchload.Run(b, 16, 0, n, "k-", func(ctx context.Context, prefix string, i int) error {
		out, err := a.Store.Claim(ctx, claim.Request{Tenant: "acme", Operation: "payment.charge", Key: prefix + strconv.Itoa(i),
			Intent: []byte(fmt.Sprintf(`{"amount_minor":%d,"currency":"CNY"}`, 100+i)), Actor: "service:bench"})
		if err != nil {
			return err
		}
		return a.Store.Complete(ctx, nil, out.Lease, snap)
	})
	b.ResetTimer()
	res, err := cells.Move(context.Background(), cells.MoveConfig{Map: m, Tenant: "acme", To: "b", Audit: auditIn("acme"), Progress: os.Stdout})
	if err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("move of %d keys (%d rows): %s, freeze window %s (load %s)\n", res.Keys, sumRows(res.Counts), res.Elapsed, res.FreezeWindow,
		strings.Join(strings.Fields(string(load))[:3], " "))
	b.ReportMetric(res.Elapsed.Seconds(), "move_s")
	b.ReportMetric(res.FreezeWindow.Seconds(), "freeze_s")
}

func sumRows(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// twoCellsB is twoCells for a benchmark: a: acme, initech; b: globex.
func twoCellsB(b *testing.B) string {
	path := filepath.Join(b.TempDir(), "cells.yaml")
	text := fmt.Sprintf("control: a\ncells:\n  a: {id: 1, url: %q, tenants: [acme, initech]}\n  b: {id: 2, url: %q, tenants: [globex]}\n",
		pgtest.URL(b), pgtest.URL(b))
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		b.Fatal(err)
	}
	return path
}
