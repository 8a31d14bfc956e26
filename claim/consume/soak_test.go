package consume_test

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/idemops/idemops/claim/consume"
)

// soakEvents is n distinct orders plus 10% of them sent twice (another message id), with 10% of
// the stream reordered (swapped with a later neighbour), deterministic for seed.
func soakEvents(n int, seed uint64) (stream []event, wantSum int64) {
	r := rand.New(rand.NewPCG(seed, 1))
	for i := range n {
		e := event{Tenant: "acme", OrderID: fmt.Sprintf("ord-%06d", i), Amount: int64(1 + r.IntN(10000))}
		wantSum += e.Amount
		stream = append(stream, e)
	}
	for _, i := range r.Perm(n)[:n/10] { // 10% duplicated
		stream = append(stream, stream[i])
	}
	r.Shuffle(len(stream)-n, func(i, j int) { stream[n+i], stream[n+j] = stream[n+j], stream[n+i] })
	// Interleave the duplicates into the stream, then reorder 10%: a duplicate may now arrive
	// before its original.
	for k := n; k < len(stream); k++ {
		j := r.IntN(k + 1)
		stream[k], stream[j] = stream[j], stream[k]
	}
	for range len(stream) / 10 {
		i := r.IntN(len(stream) - 1)
		j := min(len(stream)-1, i+1+r.IntN(50))
		stream[i], stream[j] = stream[j], stream[i]
	}
	return stream, wantSum
}

// soak publishes the stream and consumes it with dedup; it checks exact final counts.
func soak(t testing.TB, n int) time.Duration {
	b := setup(t)
	stream, wantSum := soakEvents(n, 7)
	b.publish(stream)
	cfg := b.config()
	cfg.Logger = slog.New(slog.DiscardHandler)
	c, err := consume.New(b.db, cfg, writeEffect)
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	serve(t, c, b.url)
	waitStats(t, c, "the stream consumed", func(s consume.Stats) bool { return s.Processed+s.Duplicates >= int64(len(stream)) })
	took := time.Since(began)
	s := c.Stats()
	if s.Processed != int64(n) || s.Duplicates != int64(len(stream)-n) {
		t.Fatalf("stats = %+v, want %d processed and %d duplicates", s, n, len(stream)-n)
	}
	if got := b.count(`SELECT count(*) FROM effects`); got != int64(n) {
		t.Fatalf("effects = %d, want %d", got, n)
	}
	if got := b.count(`SELECT count(DISTINCT order_id) FROM effects`); got != int64(n) {
		t.Fatalf("distinct effects = %d, want %d", got, n)
	}
	if got := b.count(`SELECT sum(amount_minor) FROM effects`); got != wantSum {
		t.Fatalf("sum of effects = %d, want %d", got, wantSum)
	}
	if got := b.count(`SELECT sum(duplicates) FROM consumed_messages WHERE consumer = 'fulfillment'`); got != int64(len(stream)-n) {
		t.Fatalf("dedup rows count %d duplicates, want %d", got, len(stream)-n)
	}
	t.Logf("soak: %d events, %d duplicated, 10%% reordered: %d effects, %d duplicates dropped, in %s",
		n, len(stream)-n, s.Processed, s.Duplicates, took.Round(time.Millisecond))
	return took
}

// TestConsume_Soak is the bounded soak: IDEMOPS_SOAK_EVENTS events (default 2,000 here; `make
// bench` runs 10,000 in BenchmarkConsumeSoak), 10% duplicated, 10% reordered, exact counts.
func TestConsume_Soak(t *testing.T) {
	t.Parallel()
	n := 2000
	if v, err := strconv.Atoi(os.Getenv("IDEMOPS_SOAK_EVENTS")); err == nil && v > 0 {
		n = v
	}
	soak(t, n)
}

// BenchmarkConsumeSoak is the full soak: 10,000 events (IDEMOPS_SOAK_EVENTS), 10% duplicated,
// 10% reordered, exact final counts; it reports events consumed per second.
func BenchmarkConsumeSoak(b *testing.B) {
	n := 10000
	if v, err := strconv.Atoi(os.Getenv("IDEMOPS_SOAK_EVENTS")); err == nil && v > 0 {
		n = v
	}
	var took time.Duration
	for range b.N {
		took = soak(b, n)
	}
	b.ReportMetric(float64(n+n/10)/took.Seconds(), "deliveries/s")
}
