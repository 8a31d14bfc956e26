package chaos

import (
	"context"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/idemops/idemops/demo"
)

// LedgerSlowShare is the share of ledger posts the ledger acts on late: it keeps the request
// LedgerSlowAct — past the relay's send timeout in this world (OutboxSendTimeout) — and only
// then books the entry, so the relay has given up on an entry that does arrive.
const (
	LedgerSlowShare = 0.05
	LedgerSlowAct   = OutboxSendTimeout + 2*time.Second
)

// The chaos world's outbox relay: a short send timeout and enough workers that the ledger's slow
// posts do not starve the other rows of a batch (a post held past the timeout blocks its worker
// until then), and a quarantine longer than the ledger's lag, so that the relay's second look
// sees an entry the ledger booked late.
const (
	OutboxSendTimeout = 3 * time.Second
	OutboxWorkers     = 16
	OutboxQuarantine  = 8 * time.Second
)

// ledger is the world's external ledger: a downstream with no idempotency (every POST books an
// entry, whatever its reference) that is sometimes slow to act. It counts the entries booked per
// reference, the executions the history allows at most one of.
type ledger struct {
	mu      sync.Mutex
	entries map[string]int
	rng     *rand.Rand
	srv     *http.Server
	url     string
	acting  sync.WaitGroup
}

func startLedger(seed int64) (*ledger, error) {
	l := &ledger{entries: map[string]int{}, rng: rand.New(rand.NewPCG(uint64(seed), 0x6c6564676572))}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /entries", l.post)
	mux.HandleFunc("GET /entries/{ref}", l.get)
	l.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	l.url = "http://" + ln.Addr().String()
	go func() { _ = l.srv.Serve(ln) }()
	return l, nil
}

// post books an entry, now or — for a slow one — after LedgerSlowAct, whether or not the
// sender is still waiting.
func (l *ledger) post(w http.ResponseWriter, r *http.Request) {
	ref := strings.TrimSpace(r.Header.Get(demo.LedgerHeaderKey))
	if ref == "" {
		http.Error(w, "reference required", http.StatusBadRequest)
		return
	}
	l.mu.Lock()
	slow := l.rng.Float64() < LedgerSlowShare
	l.mu.Unlock()
	if slow {
		l.acting.Add(1)
		defer l.acting.Done()
		time.Sleep(LedgerSlowAct) // the sender's context is gone by now; the ledger acts all the same
	}
	l.mu.Lock()
	l.entries[ref]++
	l.mu.Unlock()
	w.WriteHeader(http.StatusCreated)
}

// get answers whether an entry is booked under the reference (the relay's lookup).
func (l *ledger) get(w http.ResponseWriter, r *http.Request) {
	l.mu.Lock()
	n := l.entries[r.PathValue("ref")]
	l.mu.Unlock()
	if n == 0 {
		http.Error(w, "no entry", http.StatusNotFound)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// booked is how many entries the ledger booked under ref.
func (l *ledger) booked(ref string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.entries[ref]
}

func (l *ledger) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = l.srv.Shutdown(ctx)
}
